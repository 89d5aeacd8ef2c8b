#!/usr/bin/env bash
# The project's test command: lint, generated files fresh, release checks, then pytest. CI runs it through .ci/run.
# Usage: scripts/test.sh [--unit | --checks-only | --no-checks] [PYTEST_ARGS...]
#   --unit         tests/unit alone (one file per module, no Docker, no network), in this process: the fast tier
#   --checks-only  the lint and release checks alone, on .venv (.ci/run runs them while the test bed builds)
#   --no-checks    pytest alone (tests/unit and tests/integration)
# pytest runs its files side by side in NEURON_TORCH_TEST_WORKERS processes (pytest-xdist, default 3; 0 runs them
# in this one process); on 2 cores the heavy files then run about 2x slower each, so the gain is small. Each file is
# one unit of work for one worker, files that share a resource are one unit (tests/conftest.py, "lanes"), and the
# longest units start first.
set -euo pipefail
cd "$(dirname "$0")/.."

checks=1
tests=1
case ${1:-} in
  --unit)
    shift
    scripts/dev-setup.sh --only venv
    exec .venv/bin/python -m pytest tests/unit "$@"
    ;;
  --checks-only) tests=0; shift ;;
  --no-checks) checks=0; shift ;;
esac

venv=.venv/bin
if ((tests)); then scripts/dev-setup.sh; else scripts/dev-setup.sh --only venv; fi  # the checks need .venv only
if ((checks)); then
  "$venv/ruff" check src tests smoke_tests scripts
  "$venv/ruff" format --check src tests smoke_tests scripts
  shellcheck scripts/*.sh scripts/slurm/neuron-healthcheck scripts/slurm/verify-cluster.sbatch .ci/run
  "$venv/mypy"
  "$venv/neuron-torch" render --check
  "$venv/neuron-torch" check
fi
if ((tests)); then
  workers=${NEURON_TORCH_TEST_WORKERS:-3}
  parallel=()
  # by unit of work, longest first: the scheduler in tests/conftest.py
  if ((workers > 0)); then parallel=(-n "$workers" --dist loadfile); fi
  # The test bed is built (or found fresh) before the workers start: a test that asks for it while another reads it
  # would otherwise rebuild a stale stage (a new apt key, new locks) under a converge in flight. Without its tools
  # (docker, gpg, ...) it says why, and the tests that need it skip saying why.
  if ((workers > 0)); then scripts/testbed.sh build || echo "test.sh: the test bed did not build (see above)"; fi
  # A short temporary root: each worker adds popen-gwN/ to it, and a test's folder must still hold a Unix socket
  # path (108 bytes), as Ansible's controller makes one under TMPDIR. Kept when a test failed, for a look.
  basetemp=$(mktemp -d /tmp/nt-test.XXXXXX)
  status=0
  "$venv/python" -m pytest "${parallel[@]}" --basetemp="$basetemp" --durations=30 "$@" || status=$?
  if ((status)); then echo "test.sh: the tests' folders are kept in $basetemp"; else rm -rf "$basetemp"; fi
  exit "$status"
fi
