#!/usr/bin/env bash
# The project's test command: lint, generated files fresh, release checks, then pytest. CI runs it through .ci/run.
# Usage: scripts/test.sh [--checks-only | --no-checks] [PYTEST_ARGS...]
#   --checks-only  the lint and release checks alone, on .venv (.ci/run runs them while the test bed builds)
#   --no-checks    pytest alone
# pytest runs its files side by side in NEURON_TORCH_TEST_WORKERS processes (pytest-xdist, default 3; 0 runs them
# in this one process): most of the slow tests wait on docker, ssh, apt and pip rather than on the CPU. Each file is
# one unit of work for one worker, files that share a resource are one unit (tests/conftest.py, "lanes"), and the
# longest units start first.
set -euo pipefail
cd "$(dirname "$0")/.."

checks=1
tests=1
case ${1:-} in
  --checks-only) tests=0; shift ;;
  --no-checks) checks=0; shift ;;
esac

venv=.venv/bin
if ((tests)); then scripts/dev-setup.sh; else scripts/dev-setup.sh --only venv; fi  # the checks need .venv only
if ((checks)); then
  "$venv/ruff" check src tests smoke_tests scripts
  "$venv/ruff" format --check src tests smoke_tests scripts
  shellcheck scripts/*.sh .ci/run
  "$venv/mypy"
  "$venv/neuron-torch" render --check
  "$venv/neuron-torch" check
fi
if ((tests)); then
  workers=${NEURON_TORCH_TEST_WORKERS:-3}
  parallel=()
  if ((workers > 0)); then parallel=(-n "$workers" --dist loadgroup --no-loadscope-reorder); fi
  "$venv/python" -m pytest "${parallel[@]}" --durations=30 "$@"
fi
