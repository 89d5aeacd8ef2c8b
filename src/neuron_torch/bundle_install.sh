#!/bin/sh
# Install a neuron-torch offline bundle with the network off (written by `neuron-torch bundle`).
# Usage: install.sh [--venv DIR] [--no-apt] [--no-pip]
# Checks SHA256SUMS, apt-installs apt/*.deb, then creates the venv (default /opt/neuron-venv) and installs the
# wheels with `pip --no-index --require-hashes` from the lock. POSIX sh: runs on a bare base image.
set -eu
bundle=$(cd "$(dirname "$0")" && pwd)
venv=/opt/neuron-venv
apt=1
pip=1
while [ $# -gt 0 ]; do
    case "$1" in
        --venv) venv=$2; shift 2 ;;
        --no-apt) apt=0; shift ;;
        --no-pip) pip=0; shift ;;
        *) echo "install.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
cd "$bundle"
sha256sum --quiet --strict -c SHA256SUMS
if [ "$apt" = 1 ] && ls apt/*.deb >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$bundle"/apt/*.deb
fi
if [ "$pip" = 1 ]; then
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --disable-pip-version-check --no-index --find-links "$bundle/wheels" \
        --require-hashes --no-deps -r "$bundle/lock.txt"
    "$venv/bin/python" -m pip check
fi
echo "install.sh: installed $(sed -n 's/.*"cell": "\(.*\)",/\1/p' manifest.json) from $bundle"
