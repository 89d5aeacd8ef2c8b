#!/bin/sh
# Writes /etc/neuron-torch/version-info.json on the build target: every Neuron apt package and pip package installed,
# the kernel and dkms status. Runs as root on the target (POSIX sh: the target may have no bash yet). The cell record
# is read through neuron_cell's one checked loader (installed at /opt/neuron-torch/lib by the provisioning): a record
# of another schema stops the build, naming it.
set -eu
out=/etc/neuron-torch/version-info.json
python=/opt/neuron-torch/venv/bin/python
[ -x "$python" ] || python=python3
mkdir -p /etc/neuron-torch
apt_list=$(dpkg-query -W -f '${Package}\t${Version}\n' 'aws-neuronx-*' 2>/dev/null | grep -v '\t$' || true)
pip_list=$(/opt/neuron-torch/venv/bin/python -m pip list --format json 2>/dev/null || echo '[]')
dkms_status=$(command -v dkms >/dev/null 2>&1 && dkms status 2>&1 || echo 'dkms not installed')
APT_LIST=$apt_list PIP_LIST=$pip_list DKMS_STATUS=$dkms_status KERNEL=$(uname -r) "$python" - "$out" <<'PY'
import json, os, platform, sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, "/opt/neuron-torch/lib")
from neuron_cell import cellrecord

def cell():
    path = Path("/etc/neuron-torch/cell.json")
    if not path.exists():
        return None
    try:
        return cellrecord.load(path)
    except cellrecord.RecordError as error:
        sys.exit(f"version-info: {error}")

record = {
    "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    "cell": cell(),
    "kernel": os.environ["KERNEL"],
    "os_release": dict(
        line.rstrip("\n").split("=", 1) for line in open("/etc/os-release", encoding="utf-8") if "=" in line
    ),
    "python": platform.python_version(),
    "apt": dict(line.split("\t", 1) for line in os.environ["APT_LIST"].splitlines() if "\t" in line),
    "pip": {p["name"]: p["version"] for p in json.loads(os.environ["PIP_LIST"])},
    "dkms_status": os.environ["DKMS_STATUS"].strip(),
}
with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(record, f, indent=2, sort_keys=True)
    f.write("\n")
print(f"version-info: {sys.argv[1]}: {len(record['apt'])} apt, {len(record['pip'])} pip packages")
PY
