#!/bin/sh
# The one check of the Neuron apt key's fingerprint, run by all three places that trust the key: the image build (the
# Dockerfile's keyring stage copies this file), the neuron_repo role (ansible.builtin.script runs it on the host) and
# `neuron-torch bundle` (neuron_torch.bundle runs it from the package).
# Usage: aptkey.sh [--expect FINGERPRINT] [--source URL] [--keyring OUT] KEY
#   KEY            the downloaded (armored) key
#   --expect       the pinned fingerprint (spaces and case ignored); empty: the key is trusted unchecked, with a warning
#   --source       where KEY came from, for the messages (default: KEY)
#   --keyring OUT  once the key passed, write it dearmored to OUT (apt's signed-by keyring), atomically
# Prints the key's fingerprints; exit 1 (writing nothing) when none is the pinned one, 2 on a usage error.
# POSIX sh and gpg only: runs on a bare base image and on minimal hosts.
set -eu
usage() {
    echo "aptkey.sh: $1 (usage: aptkey.sh [--expect FINGERPRINT] [--source URL] [--keyring OUT] KEY)" >&2
    exit 2
}
expect=""
origin=""
keyring=""
key=""
while [ $# -gt 0 ]; do
    case "$1" in
        --expect | --source | --keyring)
            [ $# -ge 2 ] || usage "$1 needs a value"
            case "$1" in
                --expect) expect=$2 ;;
                --source) origin=$2 ;;
                --keyring) keyring=$2 ;;
            esac
            shift 2
            ;;
        -*) usage "unknown option $1" ;;
        *)
            [ -z "$key" ] || usage "one KEY only, got $key and $1"
            key=$1
            shift
            ;;
    esac
done
[ -n "$key" ] || usage "the KEY file is missing"
[ -r "$key" ] || usage "cannot read the key file $key"
[ -n "$origin" ] || origin=$key
command -v gpg >/dev/null 2>&1 || { echo "aptkey.sh: gpg is not installed: install it (apt-get install gpg)" >&2; exit 1; }
expect=$(printf '%s' "$expect" | tr -d '[:space:]' | tr '[:lower:]' '[:upper:]')
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
found=$(gpg --batch --quiet --homedir "$home" --show-keys --with-colons "$key" | awk -F: '$1 == "fpr" {print $10}')
listed=$(printf '%s' "$found" | tr '\n' ' ' | sed 's/ *$//; s/ /, /g')
if [ -z "$found" ]; then
    echo "aptkey.sh: the apt key at $origin holds no key (is it the key file?): refusing it" >&2
    exit 1
fi
echo "neuron apt key at $origin: fingerprint(s) $listed"
if [ -z "$expect" ]; then
    echo "aptkey.sh: no fingerprint is pinned: the key at $origin is trusted unchecked" >&2
elif ! printf '%s\n' "$found" | grep -qxF "$expect"; then
    echo "aptkey.sh: the apt key at $origin has fingerprint(s) $listed, not the pinned $expect: refusing it" \
        "(pin the publisher's fingerprint: apt.key_fingerprint, [apt] key_fingerprint of the mirror settings," \
        "or neuron_repo_key_fingerprint)" >&2
    exit 1
fi
if [ -n "$keyring" ]; then
    gpg --batch --quiet --homedir "$home" --yes --dearmor -o "$keyring.tmp" "$key"
    chmod 0644 "$keyring.tmp"
    mv -f "$keyring.tmp" "$keyring"
fi
