#!/usr/bin/env bash
# Time the molecule scenario (ansible/molecule/default: the uv-standalone route on the Ubuntu 26.04 twin) step by step,
# with Ansible's profile_tasks callback: prints each step's wall time and the slowest tasks of the converge and of the
# idempotence run. Needs the test bed serving (scripts/testbed.sh build) and docker; the scenario's containers are
# destroyed at the end. Usage: scripts/bench-converge.sh [TOP_TASKS (default 15)]
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
top=${1:-15}
if [[ ! $top =~ ^[0-9]+$ ]]; then
    echo "usage: scripts/bench-converge.sh [TOP_TASKS]: TOP_TASKS must be a number, not '$top'" >&2
    exit 2
fi
testbed=${NEURON_TORCH_TESTBED_DIR:-$repo/.testbed}
if [[ ! -f $testbed/mirror.toml ]]; then
    echo "bench-converge: no test bed at $testbed (mirror.toml): run scripts/testbed.sh build" >&2
    exit 1
fi
# The scenario's settings from the test bed's mirror settings, as tests/integration/test_molecule.py passes them.
mapfile -t settings < <("$repo/.venv/bin/python" - "$testbed/mirror.toml" <<'EOF'
import sys, tomllib
mirror = tomllib.load(open(sys.argv[1], "rb"))
print(mirror["apt"]["key_fingerprint"])
print(mirror["indexes"]["pypi"])
print(mirror["python"]["downloads_json_url"])
EOF
)
export NEURON_TORCH_TESTBED_DIR=$testbed
export NEURON_TORCH_TESTBED_KEY_FINGERPRINT=${settings[0]}
export NEURON_TORCH_TESTBED_INDEX_PYPI=${settings[1]}
export NEURON_TORCH_TESTBED_PYTHON_DOWNLOADS_JSON_URL=${settings[2]}
export PATH=$repo/.venv-ansible/bin:$PATH NO_COLOR=1 ANSIBLE_NOCOLOR=1 PY_COLORS=0
export ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks PROFILE_TASKS_TASK_OUTPUT_LIMIT=$top

"$repo/.venv/bin/neuron-torch" --matrix "$repo/constraints/test-matrix.toml" render >/dev/null
log=$(mktemp -d "${TMPDIR:-/tmp}/bench-converge.XXXXXX")
cd "$repo/ansible"
molecule destroy >/dev/null 2>&1 || true
trap 'molecule destroy >/dev/null 2>&1 || true' EXIT
total=0
for step in create prepare converge idempotence verify; do
    start=$(date +%s%N)
    if ! molecule "$step" >"$log/$step.log" 2>&1; then
        echo "bench-converge: molecule $step failed; its log: $log/$step.log" >&2
        tail -n 40 "$log/$step.log" >&2
        exit 1
    fi
    ms=$((($(date +%s%N) - start) / 1000000))
    total=$((total + ms))
    printf '%-12s %4d.%d s\n' "$step" $((ms / 1000)) $((ms % 1000 / 100))
done
printf '%-12s %4d.%d s\n' total $((total / 1000)) $((total % 1000 / 100))
for step in converge idempotence; do
    echo "--- slowest tasks of $step (profile_tasks)"
    # profile_tasks prints its summary after the recap's ==== line: "TASK NAME ---- 12.34s" lines, slowest first.
    sed -n -E '/^={20,}$/,$p' "$log/$step.log" | grep -E -- ' -+ [0-9.]+s$' | head -n "$top"
done
echo "logs: $log"
