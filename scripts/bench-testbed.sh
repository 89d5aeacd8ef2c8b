#!/usr/bin/env bash
# Time the test bed from nothing, then again with everything cached. Prints both; asserts nothing.
# Usage: scripts/bench-testbed.sh [--bases all|debian12|none]   (removes .testbed/ and the local base images first)
set -euo pipefail
cd "$(dirname "$0")/.."
bases=all
if [[ ${1:-} == --bases ]]; then bases=${2:?--bases needs a value}; fi

scripts/testbed.sh stop >/dev/null || true
rm -rf .testbed
if /usr/bin/docker info >/dev/null 2>&1; then
    for image in neuron-torch-base:debian12 neuron-torch-base:ubuntu24.04-twin neuron-torch-base:ubuntu26.04-twin; do
        /usr/bin/docker rmi -f "$image" >/dev/null 2>&1 || true
    done
fi

now() { python3 -c 'import time; print(time.monotonic())'; }
run() {
    local start
    start=$(now)
    scripts/testbed.sh build --bases "$bases" >/dev/null
    python3 -c "import sys; print(round($(now) - $start, 1))"
}
first=$(run)
second=$(run)
percent=$(python3 -c "print(round(100 * $second / $first, 1))")
echo "bench-testbed: first run ${first} s, second run ${second} s (${percent}% of the first), bases: ${bases}"
