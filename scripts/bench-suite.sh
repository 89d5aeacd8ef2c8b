#!/usr/bin/env bash
# What each heavy unit of the test suite costs when it runs alone: wall seconds and the machine's CPU seconds (all
# processes, containers included: the busy time of /proc/stat), one pytest run per unit, one after another. On the
# 2-core CI machine the files run side by side (scripts/test.sh) and the machine is busy throughout, so the sum of the
# CPU seconds over 2 is about what pytest takes there, whatever the order: this prints that bound.
# Needs what the tests need (scripts/dev-setup.sh, docker, the test bed; it is built first). Usage:
#   scripts/bench-suite.sh [PATH ...]   (default: the heavy units; a PATH is a test file or folder)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

units=("$@")
if ((${#units[@]} == 0)); then
    units=(tests/integration/test_fleet.py tests/integration/test_packer.py tests/integration/test_molecule.py tests/integration/test_ansible.py tests/integration/test_image.py
        tests/integration/smoke tests/integration/test_quickstart.py tests/integration/test_pip_tools.py)
fi
for unit in "${units[@]}"; do
    [[ -e $unit ]] || { echo "bench-suite: no test file or folder $unit" >&2; exit 2; }
done
scripts/testbed.sh build > /dev/null
busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; }  # user nice system irq softirq, in ticks
ticks=$(getconf CLK_TCK)
total_cpu=0
total_wall=0
printf '%-28s %6s %6s %s\n' unit wall cpu status
for unit in "${units[@]}"; do
    basetemp=$(mktemp -d /tmp/nt-bench.XXXXXX)
    cpu0=$(busy)
    start=$SECONDS
    status=passed
    .venv/bin/python -m pytest "$unit" -q -p no:cacheprovider --basetemp="$basetemp" > "$basetemp.log" 2>&1 ||
        status="failed (log: $basetemp.log)"
    wall=$((SECONDS - start))
    cpu=$((($(busy) - cpu0) / ticks))
    rm -rf "$basetemp"
    [[ $status == passed ]] && rm -f "$basetemp.log"
    total_cpu=$((total_cpu + cpu))
    total_wall=$((total_wall + wall))
    printf '%-28s %5ss %5ss %s\n' "$unit" "$wall" "$cpu" "$status"
done
printf '%-28s %5ss %5ss\n' total "$total_wall" "$total_cpu"
echo "bench-suite: on $(nproc) cores these units need at least $((total_cpu / $(nproc))) s side by side"
