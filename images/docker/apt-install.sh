#!/usr/bin/env bash
# apt-install.sh SPEC...: install Debian/Ubuntu packages inside an image build, leaving no apt lists or .debs.
# A plain name is installed only when missing (the test bed's bases already carry python3 and gnupg); a pinned
# NAME=VERSION* is always installed. A CA bundle passed as the build secret `ca` is trusted by apt for this call only.
set -euo pipefail

wanted=()
for spec in "$@"; do
  if [[ "$spec" == *=* ]] || ! dpkg-query -W -f='${Status}' "$spec" 2>/dev/null | grep -q "install ok installed"; then
    wanted+=("$spec")
  fi
done
if ((${#wanted[@]} == 0)); then
  echo "apt-install: already installed: $*"
  exit 0
fi
options=()
if [[ -s /run/secrets/ca ]]; then
  options=(-o "Acquire::https::CaInfo=/run/secrets/ca")
fi
apt-get "${options[@]}" update
apt-get "${options[@]}" install -y --no-install-recommends "${wanted[@]}"
apt-get clean
rm -rf /var/lib/apt/lists/*
