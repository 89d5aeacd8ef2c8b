#!/usr/bin/env bash
# Make .venv: the project (editable) with its dev tools, and the CPU torch the smoke tests run on.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${NEURON_TORCH_DEV_PYTHON:-python3.11}
if ! command -v "$python" >/dev/null; then
  echo "dev-setup: $python not found; set NEURON_TORCH_DEV_PYTHON to a Python 3.11 interpreter" >&2
  exit 2
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev]'
echo "dev-setup: .venv ready ($(.venv/bin/python --version))"
