#!/usr/bin/env bash
# The project's test command: lint, generated files fresh, release checks, then pytest. CI runs it through .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/dev-setup.sh
venv=.venv/bin
"$venv/ruff" check src tests smoke_tests scripts
"$venv/ruff" format --check src tests smoke_tests scripts
shellcheck scripts/*.sh .ci/run
"$venv/mypy"
"$venv/neuron-torch" render --check
"$venv/neuron-torch" check
"$venv/python" -m pytest --durations=30 "$@"
