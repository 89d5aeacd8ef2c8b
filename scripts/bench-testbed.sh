#!/usr/bin/env bash
# Time the test bed from nothing (cold), then again with everything cached (warm). Prints both; asserts nothing.
# Usage: scripts/bench-testbed.sh [--bases all|debian12|none]
#
# The bench builds a second, throwaway bed beside this checkout's: its own folder (NEURON_TORCH_TESTBED_DIR, a temp
# dir), its own port (NEURON_TORCH_TESTBED_PORT, the bed's port + 100), and its own base-image repository
# (neuron-torch-bench-base:<tag>, via a copy of the test release). It never touches .testbed/ or the shared
# neuron-torch-base images, and removes what it made when done. Cold includes the base images, the downloads from
# PyPI and the uv-standalone interpreter archive; only apt's and Docker's own caches on this machine are not cold.
set -euo pipefail
cd "$(dirname "$0")/.."
bases=all
if [[ ${1:-} == --bases ]]; then bases=${2:?--bases needs a value}; fi
python=${PYTHON:-.venv/bin/python}
[[ -x $python ]] || python=python3

bench=$(mktemp -d /tmp/neuron-torch-bench.XXXXXX)
port=$("$python" -c 'from tests.testbed.server import PORT; print(PORT + 100)')
bed_port=$("$python" -c 'from tests.testbed.server import PORT; print(PORT)')
export NEURON_TORCH_TESTBED_DIR="$bench/.testbed" NEURON_TORCH_TESTBED_PORT="$port"
mkdir -p "$bench/constraints"
sed -e "s#127\.0\.0\.1:$bed_port#127.0.0.1:$port#g" -e 's#"neuron-torch-base:#"neuron-torch-bench-base:#' \
    constraints/test-matrix.toml >"$bench/constraints/test-matrix.toml"
matrix="$bench/constraints/test-matrix.toml"

cleanup() {
    NEURON_TORCH_TESTBED_DIR="$bench/.testbed" scripts/testbed.sh stop --matrix "$matrix" >/dev/null 2>&1 || true
    if /usr/bin/docker info >/dev/null 2>&1; then
        /usr/bin/docker images --format '{{.Repository}}:{{.Tag}}' | grep '^neuron-torch-bench-base:' |
            xargs -r /usr/bin/docker rmi -f >/dev/null 2>&1 || true
    fi
    rm -rf "$bench"
}
trap cleanup EXIT

now() { python3 -c 'import time; print(time.monotonic())'; }
run() {
    local start
    start=$(now)
    scripts/testbed.sh build --matrix "$matrix" --bases "$bases" >"$bench/build-$1.log" 2>&1 ||
        { tail -20 "$bench/build-$1.log" >&2; exit 1; }
    python3 -c "import sys; print(round($(now) - $start, 1))"
}
cold=$(run cold)
grep -E '^testbed: .*(built in|ready in)' "$bench/build-cold.log" | sed 's/^/bench-testbed: cold: /'
warm=$(run warm)
percent=$(python3 -c "print(round(100 * $warm / $cold, 1))")
echo "bench-testbed: cold ${cold} s, warm ${warm} s (${percent}% of cold), bases: ${bases}"
