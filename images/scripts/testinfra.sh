#!/usr/bin/env bash
# Runs the shared testinfra suite (smoke_tests/infra) against the Packer build target, from the controller.
# Packer's shell-local provisioner sets: RUN_TESTINFRA, TESTINFRA_PYTHON, TESTINFRA_HOSTS, TESTINFRA_TARGET,
# CELL_FILE, LOCK_FILE, REPORT_DIR, TESTINFRA_CAPTURED (true: the target is the build's final state; the hygiene
# checks run too) and, for ssh:// targets, TESTINFRA_SSH_KEY (the build's private key; or TESTINFRA_SSH_KEY_FILE)
# and the host key to trust: TESTINFRA_HOST_KEY_FILE (the target's public host key, read through Packer's session)
# or TESTINFRA_KNOWN_HOSTS (a known_hosts file). Host-key checking is always on: no key to check, no run.
set -euo pipefail
if [[ "${RUN_TESTINFRA:-true}" != "true" ]]; then
    echo "testinfra: skipped (run_testinfra = false)"
    exit 0
fi
suite=smoke_tests/infra
if [[ ! -d "$suite" ]]; then
    echo "testinfra: $PWD/$suite is missing: the shared suite (branch image) must be in the checkout" >&2
    exit 1
fi
mkdir -p "$REPORT_DIR"
args=("$suite" "--hosts=$TESTINFRA_HOSTS" --cell-file "$CELL_FILE" --lock "$LOCK_FILE" --target "$TESTINFRA_TARGET"
    -p no:cacheprovider "--junitxml=$REPORT_DIR/testinfra.xml")
if [[ "${TESTINFRA_CAPTURED:-false}" == "true" ]]; then
    args+=(--captured)
fi
if [[ "$TESTINFRA_HOSTS" == ssh://* ]]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    key=${TESTINFRA_SSH_KEY_FILE:-$work/key}
    if [[ -z "${TESTINFRA_SSH_KEY_FILE:-}" ]]; then
        (umask 077 && printf '%s\n' "${TESTINFRA_SSH_KEY:?set TESTINFRA_SSH_KEY or TESTINFRA_SSH_KEY_FILE}" >"$key")
    fi
    address=${TESTINFRA_HOSTS#ssh://}
    address=${address#*@}
    known=${TESTINFRA_KNOWN_HOSTS:-$work/known_hosts}
    if [[ -z "${TESTINFRA_KNOWN_HOSTS:-}" ]]; then
        if [[ ! -s "${TESTINFRA_HOST_KEY_FILE:-}" ]]; then
            echo "testinfra: no host key to check $address against: set TESTINFRA_HOST_KEY_FILE (the target's" \
                "ssh_host_ed25519_key.pub) or TESTINFRA_KNOWN_HOSTS (a known_hosts file)" >&2
            exit 2
        fi
        host=${address%:*} port=${address##*:}
        [[ "$address" == *:* ]] || port=22
        pattern=$host
        [[ "$port" == 22 ]] || pattern="[$host]:$port"
        printf '%s %s\n' "$pattern" "$(cut -d' ' -f1,2 "$TESTINFRA_HOST_KEY_FILE")" >"$known"
    fi
    cat >"$work/ssh_config" <<CONFIG
Host *
    IdentityFile $key
    IdentitiesOnly yes
    UserKnownHostsFile $known
    StrictHostKeyChecking yes
    BatchMode yes
    ConnectTimeout 30
CONFIG
    args+=("--ssh-config=$work/ssh_config" --sudo)
fi
echo "testinfra: $TESTINFRA_PYTHON -m pytest ${args[*]}"
"$TESTINFRA_PYTHON" -m pytest "${args[@]}"
