#!/usr/bin/env bash
# Make .venv: the project (editable) with its dev tools and the model evaluation's extra (eval), and the CPU torch
# the smoke tests run on (the torch of the test release's default cell, read from constraints/test-matrix.toml, so
# no version is typed here).
set -euo pipefail
cd "$(dirname "$0")/.."

python=${NEURON_TORCH_DEV_PYTHON:-python3.11}
if ! command -v "$python" >/dev/null; then
  echo "dev-setup: $python not found; set NEURON_TORCH_DEV_PYTHON to a Python 3.11 interpreter" >&2
  exit 2
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet --no-warn-script-location -e '.[dev,eval]'
torch=$(.venv/bin/python - <<'PY'
import tomllib
matrix = tomllib.load(open("constraints/test-matrix.toml", "rb"))
family = matrix["release"]["default_cell"].split("-")[0]
print(matrix["families"][family]["torch"])
PY
)
if ! .venv/bin/python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch')" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet "torch==$torch" ninja
fi
echo "dev-setup: .venv ready ($(.venv/bin/python --version), torch $torch)"

# .venv-ansible: the Ansible controller (ansible-core needs Python >= 3.12), pinned by ansible/requirements-controller.txt.
# NEURON_TORCH_SKIP_ANSIBLE=1 skips it.
if [[ "${NEURON_TORCH_SKIP_ANSIBLE:-0}" != 1 ]]; then
  ansible_python=${NEURON_TORCH_ANSIBLE_PYTHON:-}
  if [[ -z "$ansible_python" ]]; then
    # pyenv's shims answer `command -v` even for versions they will not run: ask each candidate to run.
    for candidate in python3.12 python3.13 "$(pyenv root 2>/dev/null)"/versions/3.1[23]*/bin/python3; do
      if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then
        ansible_python=$candidate
        break
      fi
    done
  fi
  if [[ -z "$ansible_python" ]]; then
    echo "dev-setup: no Python >= 3.12 for .venv-ansible; set NEURON_TORCH_ANSIBLE_PYTHON (skipping the Ansible venv)" >&2
  else
    [ -x .venv-ansible/bin/python ] || "$ansible_python" -m venv .venv-ansible
    stamp=.venv-ansible/.requirements-controller.txt
    if ! cmp -s ansible/requirements-controller.txt "$stamp"; then
      .venv-ansible/bin/python -m pip install --quiet --upgrade pip
      .venv-ansible/bin/python -m pip install --quiet -r ansible/requirements-controller.txt
      cp ansible/requirements-controller.txt "$stamp"
    fi
    echo "dev-setup: .venv-ansible ready ($(.venv-ansible/bin/python --version), $(.venv-ansible/bin/ansible --version | sed -n 1p))"
  fi
fi
