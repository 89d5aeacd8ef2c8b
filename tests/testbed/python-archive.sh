#!/bin/bash
# Run inside the OLDER Debian suite's twin (docker run, see standalone.py): repackage that suite's python3.X debs into
# python-build-standalone's install_only layout (python/bin/python3.X, python/lib/python3.X, the shared libraries it
# needs in python/lib with an $ORIGIN RUNPATH), so that `uv python install` accepts it. Writes to /out: the tree
# (python/), version.txt (the full CPython version) and pip_version.txt (the pip wheel ensurepip wants in _bundled:
# Debian's python3-pip-whl is de-vendored, so standalone.py adds PyPI's and makes the archive).
# Usage: python-archive.sh 3.X
set -euo pipefail
v=${1:?usage: python-archive.sh 3.X}
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends patchelf >/dev/null
# The interpreter, its standard library, ensurepip's wheels, and every library lib-dynload links against (glibc is
# the host's, as in python-build-standalone).
pkgs="python$v-minimal libpython$v-minimal libpython$v-stdlib python$v libpython$v python$v-venv
libffi8 libssl3t64 libsqlite3-0 libexpat1 zlib1g libbz2-1.0 liblzma5 libmpdec4 libncursesw6 libtinfo6
libreadline8t64 libuuid1 libzstd1 libdb5.3t64 libgdbm6t64 libgdbm-compat4t64 libnsl2 libtirpc3t64"
work=$(mktemp -d) && cd "$work" && mkdir debs x
# shellcheck disable=SC2086
(cd debs && apt-get download -qq $pkgs 2>/dev/null)
for deb in debs/*.deb; do dpkg-deb -x "$deb" x; done
full=$(dpkg-deb -f debs/python"$v"-minimal_*.deb Version | sed 's/[-+~].*//')
mkdir -p python/bin python/lib
cp x/usr/bin/python"$v" python/bin/
ln -s python"$v" python/bin/python3 && ln -s python"$v" python/bin/python
cp -a x/usr/lib/python"$v" python/lib/
cp -a x/usr/lib/x86_64-linux-gnu/lib*.so* python/lib/
cp -a x/usr/lib/x86_64-linux-gnu/engines-3 python/lib/ 2>/dev/null || true
stdlib=python/lib/python$v
# No EXTERNALLY-MANAGED marker and no links out of the tree (Debian's sitecustomize -> /etc): uv refuses those.
rm -f "$stdlib/EXTERNALLY-MANAGED"
find python -type l -lname '/*' -print -delete
# ensurepip: its _bundled folder (filled by standalone.py), no pointer to Debian's /usr/share/python-wheels.
sed -n 's/^_PIP_VERSION = "\(.*\)"/\1/p' "$stdlib/ensurepip/__init__.py" > /out/pip_version.txt
mkdir -p "$stdlib/ensurepip/_bundled"
sed -i "/'WHEEL_PKG_DIR': '\/usr\/share\/python-wheels\/',/d" "$stdlib"/_sysconfigdata_*.py
if grep -q WHEEL_PKG_DIR "$stdlib"/_sysconfigdata_*.py; then echo "WHEEL_PKG_DIR is still set" >&2; exit 1; fi
mkdir -p "$stdlib/site-packages"
# $ORIGIN is for the dynamic loader, not the shell.
# shellcheck disable=SC2016
patchelf --set-rpath '$ORIGIN/../lib' python/bin/python"$v"
# shellcheck disable=SC2016
for so in "$stdlib"/lib-dynload/*.so; do patchelf --set-rpath '$ORIGIN/../..' "$so"; done
# shellcheck disable=SC2016
for so in python/lib/lib*.so.*; do [ -L "$so" ] || patchelf --set-rpath '$ORIGIN' "$so"; done
python/bin/python"$v" -c 'import ssl, sqlite3, ctypes, lzma, bz2, zlib, decimal, uuid, readline, venv'
echo "$full" > /out/version.txt
cp -a python /out/
