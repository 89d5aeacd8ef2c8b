#!/usr/bin/env bash
# verify-device: the one command to run after provisioning a TorchNeuron host, image or container.
# Runs the neuron_smoke stages (see smoke_tests/README.md); all options go to `python -m neuron_smoke`.
# Exit codes: 0 all passed, 1 a check failed, 2 usage error, 3 the requested device is not present.
#
# Installed as /usr/local/bin/verify-device (a symlink or a copy) with the suite at /opt/neuron-torch/smoke_tests and
# neuron_cell (the lock and pin code it shares with the builders) at /opt/neuron-torch/lib; in a checkout they are
# smoke_tests/ and src/. NEURON_TORCH_SMOKE_DIR and NEURON_TORCH_PYTHON override where the suite and the Python are.
# `pip install` of the toolkit installs a verify-device console script of its own (the same suite, no script).
set -euo pipefail

INSTALLED_SMOKE_DIR=/opt/neuron-torch/smoke_tests

find_smoke_dir() {
  if [[ -n "${NEURON_TORCH_SMOKE_DIR:-}" ]]; then
    printf '%s\n' "$NEURON_TORCH_SMOKE_DIR"
    return
  fi
  # readlink -f: a /usr/local/bin symlink must resolve to the checkout or install it points into.
  local here
  here="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
  if [[ -d "$here/../smoke_tests/neuron_smoke" ]]; then
    printf '%s\n' "$(cd "$here/../smoke_tests" && pwd)"
  else
    printf '%s\n' "$INSTALLED_SMOKE_DIR"
  fi
}

smoke_dir="$(find_smoke_dir)"
if [[ ! -d "$smoke_dir/neuron_smoke" ]]; then
  echo "verify-device: error: smoke tests not found at $smoke_dir (set NEURON_TORCH_SMOKE_DIR)" >&2
  exit 2
fi

python="${NEURON_TORCH_PYTHON:-python3}"
if ! command -v "$python" >/dev/null 2>&1; then
  echo "verify-device: error: Python not found: $python (set NEURON_TORCH_PYTHON)" >&2
  exit 2
fi

# neuron_cell beside the suite: /opt/neuron-torch/lib when installed, src/ in a checkout; else the Python's own.
lib_dir="$smoke_dir/../lib"
if [[ -d "$smoke_dir/../src/neuron_cell" ]]; then lib_dir="$smoke_dir/../src"; fi
if [[ -f "$lib_dir/neuron_cell/__init__.py" ]]; then
  export PYTHONPATH="$smoke_dir:$lib_dir${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$smoke_dir${PYTHONPATH:+:$PYTHONPATH}"
  if ! "$python" -c 'import neuron_cell' >/dev/null 2>&1; then
    echo "verify-device: error: neuron_cell is neither in $lib_dir nor importable by $python" \
      "(copy the toolkit's src/neuron_cell to $lib_dir)" >&2
    exit 2
  fi
fi
exec "$python" -m neuron_smoke "$@"
