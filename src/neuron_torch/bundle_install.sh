#!/bin/sh
# Install a neuron-torch offline bundle with the network off (written by `neuron-torch bundle`).
# Usage: install.sh [--venv DIR] [--prefix DIR] [--no-apt] [--no-pip]
# Checks SHA256SUMS and that the cell's Python (python3.X) can make a venv, apt-installs apt/*.deb, then creates the
# venv (default /opt/neuron-venv) and installs the lock's wheels with neuron_cell.lockinstall (the one lock installation,
# as in the image and the python_env role: --no-index --find-links wheels, --require-hashes --no-deps, then pip check).
# Then verify-device, as an image and a host have it: the smoke tests and neuron_cell under the prefix (default
# /opt/neuron-torch: smoke_tests/ and lib/), the cell record at /etc/neuron-torch/cell.json (what verify-device checks
# the versions against) and DIR/bin/verify-device, which runs them with the venv's Python.
# POSIX sh: runs on a bare base image.
set -eu
bundle=$(cd "$(dirname "$0")" && pwd)
venv=/opt/neuron-venv
prefix=/opt/neuron-torch
apt=1
pip=1
usage="usage: install.sh [--venv DIR] [--prefix DIR] [--no-apt] [--no-pip]"
while [ $# -gt 0 ]; do
    case "$1" in
        --venv | --prefix)
            if [ $# -lt 2 ] || [ -z "$2" ]; then
                echo "install.sh: $1 needs a directory ($usage)" >&2
                exit 2
            fi
            if [ "$1" = --venv ]; then venv=$2; else prefix=$2; fi
            shift 2 ;;
        --no-apt) apt=0; shift ;;
        --no-pip) pip=0; shift ;;
        -h | --help) echo "$usage"; exit 0 ;;
        *) echo "install.sh: unknown option $1 ($usage)" >&2; exit 2 ;;
    esac
done
# A relative DIR is the caller's, not the bundle's: the script works in the bundle from here on, and the venv's
# verify-device names both folders wherever it is run from.
case $venv in /*) ;; *) venv=$(pwd)/$venv ;; esac
case $prefix in /*) ;; *) prefix=$(pwd)/$prefix ;; esac
cd "$bundle"
sha256sum --quiet --strict -c SHA256SUMS
# Before anything is installed: the cell's Python, able to make a venv (Debian's and Ubuntu's python3 cannot without
# their python3.X-venv package, which Canonical's AMIs do not install).
version=$(sed -n 's/^  "python": "\(.*\)",$/\1/p' manifest.json)
python=python$version
if [ "$pip" = 1 ] && [ ! -x "$venv/bin/python" ]; then
    if ! command -v "$python" >/dev/null 2>&1; then
        echo "install.sh: this bundle is for Python $version and $python is not on this machine:" \
            "install it, or bundle a cell whose Python this machine has (neuron-torch matrix)" >&2
        exit 1
    fi
    probe=$(mktemp -d)
    if ! "$python" -m venv "$probe/venv" >/dev/null 2>&1; then
        rm -rf "$probe"
        echo "install.sh: $python cannot make a venv here: install python$version-venv (Debian, Ubuntu: Canonical's" \
            "AMIs lack it) from your OS mirror, then run install.sh again; nothing was installed" >&2
        exit 1
    fi
    rm -rf "$probe"
fi
if [ "$apt" = 1 ] && ls apt/*.deb >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$bundle"/apt/*.deb
fi
if [ "$pip" = 1 ]; then
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
    # neuron_cell whole (SHA256SUMS checked each file; its digest proves none is missing or added), then its installer.
    kit=$(sed -n 's/^  "neuron_cell": "\(.*\)",\{0,1\}$/\1/p' manifest.json)
    PYTHONPATH="$bundle" "$venv/bin/python" -m neuron_cell --expect "$kit"
    PYTHONPATH="$bundle" "$venv/bin/python" -m neuron_cell.lockinstall --venv "$venv" --find-links "$bundle/wheels" \
        "$bundle/lock.txt"
    suite=$(sed -n 's/^  "neuron_smoke": "\(.*\)",\{0,1\}$/\1/p' manifest.json)
    PYTHONPATH="$bundle" "$venv/bin/python" -m neuron_cell --expect "$suite" --root "$bundle/neuron_smoke"
    mkdir -p "$prefix/lib" "$prefix/smoke_tests" /etc/neuron-torch
    rm -rf "$prefix/lib/neuron_cell" "$prefix/smoke_tests/neuron_smoke"
    cp -R "$bundle/neuron_cell" "$prefix/lib/neuron_cell"
    cp -R "$bundle/neuron_smoke" "$prefix/smoke_tests/neuron_smoke"
    cp "$bundle/cell.json" /etc/neuron-torch/cell.json
    chmod -R u=rwX,go=rX "$prefix/lib" "$prefix/smoke_tests" /etc/neuron-torch/cell.json
    printf '#!/bin/sh\n# verify-device, installed by a neuron-torch bundle: the smoke tests with the venv'"'"'s Python.\n%s\n' \
        "PYTHONPATH=\"$prefix/smoke_tests:$prefix/lib\${PYTHONPATH:+:\$PYTHONPATH}\" exec \"$venv/bin/python\" -m neuron_smoke \"\$@\"" \
        > "$venv/bin/verify-device"
    chmod 0755 "$venv/bin/verify-device"
    echo "install.sh: verify-device is $venv/bin/verify-device"
fi
echo "install.sh: installed $(sed -n 's/.*"cell": "\(.*\)",/\1/p' manifest.json) from $bundle"
