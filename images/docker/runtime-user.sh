#!/usr/bin/env bash
# runtime-user.sh: make the image's non-root user `neuron`, uid and gid 1000, home /home/neuron.
# The official ubuntu images since 23.04 already hold a user and group `ubuntu` with uid/gid 1000, where
# `useradd --uid 1000` fails ("UID 1000 is not unique", exit 4): an existing uid-1000 user and gid-1000 group are
# renamed to `neuron` (home moved), otherwise they are created. Either way the image runs as 1000:1000.
set -euo pipefail
name=neuron
home=/home/$name

group=$(getent group 1000 | cut -d: -f1 || true)
if [[ -z "$group" ]]; then
  groupadd --gid 1000 "$name"
elif [[ "$group" != "$name" ]]; then
  groupmod --new-name "$name" "$group"
fi

user=$(getent passwd 1000 | cut -d: -f1 || true)
if [[ -z "$user" ]]; then
  useradd --uid 1000 --gid 1000 --create-home --home-dir "$home" --shell /bin/bash "$name"
else
  if [[ "$user" != "$name" ]]; then
    usermod --login "$name" "$user"
  fi
  usermod --gid 1000 --shell /bin/bash --home "$home" --move-home "$name"
  mkdir -p "$home"
  chown 1000:1000 "$home"
fi
echo "runtime-user: $(getent passwd 1000)"
