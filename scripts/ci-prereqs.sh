#!/usr/bin/env bash
# Install what the hermetic test bed needs (tests/testbed) and start dockerd if it is not running.
# Idempotent: a second run installs nothing and leaves a running dockerd alone. Needs root (CI runners are root).
set -euo pipefail

packages=(docker.io mmdebstrap gnupg dpkg-dev apt-utils shellcheck uidmap packer libfabric-bin)
packages+=(docker-registry skopeo apache2-utils openssl)  # the release tests' registry (tests/testbed/registry.py)
log=/tmp/dockerd.log

missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
    echo "ci-prereqs: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    echo "ci-prereqs: packages present (${packages[*]})"
fi

# Debian's docker CLI builds with BuildKit; the preinstalled /usr/local/bin/docker may lack buildx.
docker=/usr/bin/docker
if "$docker" info >/dev/null 2>&1; then
    echo "ci-prereqs: dockerd already running"
    exit 0
fi
echo "ci-prereqs: starting dockerd (log: $log)"
nohup dockerd >"$log" 2>&1 &
for _ in $(seq 1 60); do
    if "$docker" info >/dev/null 2>&1; then
        echo "ci-prereqs: dockerd is up"
        exit 0
    fi
    sleep 1
done
echo "ci-prereqs: dockerd did not start within 60 s; last lines of $log:" >&2
tail -n 30 "$log" >&2
exit 1
