#!/usr/bin/env bash
# Make the two development venvs. Usage: scripts/dev-setup.sh [--only venv|ansible]
# - .venv: the project (editable) with its dev tools and the model evaluation's extra (eval), and the CPU torch the
#   smoke tests run on (the torch of the test release's default cell, read from constraints/test-matrix.toml, so no
#   version is typed here).
# - .venv-ansible: the Ansible controller (ansible-core needs Python >= 3.12), pinned by
#   ansible/requirements-controller.txt. NEURON_TORCH_SKIP_ANSIBLE=1 skips it.
# The two are independent, so they are made side by side. Both install through the project's pinned uv (pyproject's
# uv dependency, put into .venv with pip first): uv downloads in parallel and keeps what it downloaded in its cache,
# so the second venv, a rerun or another checkout downloads nothing twice. uv does not read pip's configuration, so
# the find-links, index URLs, constraints and CA bundle that pip has on this machine are handed to it. Each venv is
# left alone while its inputs (stamped in the venv) are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

only=""
if [[ ${1:-} == --only ]]; then only=${2:-}; fi
if [[ $# -gt 0 && ! ($only == venv || $only == ansible) ]]; then
  echo "dev-setup: usage: scripts/dev-setup.sh [--only venv|ansible]" >&2
  exit 2
fi

python=${NEURON_TORCH_DEV_PYTHON:-python3.11}
if ! command -v "$python" >/dev/null; then
  echo "dev-setup: $python not found; set NEURON_TORCH_DEV_PYTHON to a Python 3.11 interpreter" >&2
  exit 2
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
uv_pin=$(.venv/bin/python -c 'import tomllib
print(next(d for d in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"] if d.startswith("uv==")))')
if [[ "$(.venv/bin/uv --version 2>/dev/null | cut -d' ' -f2)" != "${uv_pin#uv==}" ]]; then
  .venv/bin/python -m pip install --quiet --no-warn-script-location "$uv_pin"
fi

# pip's configuration (pip.conf files and PIP_* variables), as uv options; pip takes the best match across all its
# indexes, so uv does too (its default is the first index that has the package).
uv_options=(--index-strategy unsafe-best-match)
cert=""
while IFS= read -r line; do
  value=${line#*=}
  value=${value#\'}
  value=${value%\'}
  case ${line%%=*} in
    *.index-url) uv_options+=(--index-url "$value") ;;
    *.extra-index-url) for v in $value; do uv_options+=(--extra-index-url "$v"); done ;;
    *.find-links) for v in $value; do uv_options+=(--find-links "$v"); done ;;
    *.constraint) for v in $value; do uv_options+=(--constraint "$v"); done ;;
    *.cert) cert=$value ;;
  esac
done < <(.venv/bin/python -m pip config list 2>/dev/null)
if [[ -n $cert ]]; then export SSL_CERT_FILE=$cert; fi

# install VENV STAMP_INPUT... -- UV_PIP_INSTALL_ARGS...: uv pip install into VENV unless its stamp says it is current.
install() {
  local venv=$1 inputs=()
  shift
  while [[ $1 != -- ]]; do inputs+=("$1"); shift; done
  shift
  local stamp
  stamp=$(cat "${inputs[@]}" <(printf '%s\n' "$@" "${uv_options[@]}") | sha256sum | cut -d' ' -f1)
  if [[ "$(cat "$venv/.dev-setup-stamp" 2>/dev/null)" == "$stamp" ]]; then return 0; fi
  .venv/bin/uv pip install --quiet --python "$venv/bin/python" "${uv_options[@]}" "$@"
  echo "$stamp" >"$venv/.dev-setup-stamp"
}

make_venv() {
  local torch
  torch=$(.venv/bin/python - <<'PY'
import tomllib
matrix = tomllib.load(open("constraints/test-matrix.toml", "rb"))
family = matrix["release"]["default_cell"].split("-")[0]
print(matrix["families"][family]["torch"])
PY
)
  install .venv pyproject.toml scripts/dev-constraints.txt -- --constraint scripts/dev-constraints.txt \
    --upgrade-package pip pip -e '.[dev,eval]' "torch==$torch" ninja
  echo "dev-setup: .venv ready ($(.venv/bin/python --version), torch $torch)"
}

make_ansible_venv() {
  local ansible_python=${NEURON_TORCH_ANSIBLE_PYTHON:-}
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
    echo "dev-setup: no Python >= 3.12 for .venv-ansible; set NEURON_TORCH_ANSIBLE_PYTHON" \
      "(skipping the Ansible venv)" >&2
    return 0
  fi
  [ -x .venv-ansible/bin/python ] || "$ansible_python" -m venv .venv-ansible
  local requirements=ansible/requirements-controller.txt
  install .venv-ansible "$requirements" -- --upgrade-package pip pip -r "$requirements"
  echo "dev-setup: .venv-ansible ready ($(.venv-ansible/bin/python --version)," \
    "$(.venv-ansible/bin/ansible --version | sed -n 1p))"
}

ansible_pid=""
ansible_log=$(mktemp /tmp/dev-setup-ansible.XXXXXX)
trap 'rm -f "$ansible_log"' EXIT
if [[ $only != venv && "${NEURON_TORCH_SKIP_ANSIBLE:-0}" != 1 ]]; then
  make_ansible_venv >"$ansible_log" 2>&1 &
  ansible_pid=$!
fi
if [[ $only != ansible ]]; then make_venv; fi
if [[ -n $ansible_pid ]]; then
  status=0
  wait "$ansible_pid" || status=$?
  cat "$ansible_log"
  if ((status)); then
    echo "dev-setup: .venv-ansible failed (exit $status)" >&2
    exit "$status"
  fi
fi
