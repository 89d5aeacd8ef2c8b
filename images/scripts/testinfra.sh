#!/usr/bin/env bash
# Runs the shared testinfra suite (smoke_tests/infra) against the Packer build target, from the controller.
# Packer's shell-local provisioner sets: RUN_TESTINFRA, TESTINFRA_PYTHON, TESTINFRA_HOSTS, TESTINFRA_TARGET,
# CELL_FILE, LOCK_FILE, REPORT_DIR, TESTINFRA_CAPTURED (true: the target is the build's final state; the hygiene
# checks run too) and, for ssh:// targets, TESTINFRA_SSH_KEY (the build's private key; or TESTINFRA_SSH_KEY_FILE)
# and the host key to trust: TESTINFRA_HOST_KEY_FILE (the target's public host key, read through Packer's session)
# or TESTINFRA_KNOWN_HOSTS (a known_hosts file). Host-key checking is always on: no key to check, no run.
# TESTINFRA_SSH_MASTER (ssh:// only): "keep" opens an SSH master connection (host key checked) and leaves it open for
# up to 60 idle minutes; "reuse" runs over that master only and closes it at the end. That is how the AMI build checks
# its final state: the cleanup removes the key a new connection would log in with, not a connection already open.
# The master's socket lives in TESTINFRA_CONTROL_DIR (default $XDG_RUNTIME_DIR or /tmp, neuron-torch-ssh-UID, 0700).
# TESTINFRA_JUNIT: the JUnit report's file name in REPORT_DIR (default testinfra.xml).
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
    -p no:cacheprovider "--junitxml=$REPORT_DIR/${TESTINFRA_JUNIT:-testinfra.xml}")
if [[ "${TESTINFRA_CAPTURED:-false}" == "true" ]]; then
    args+=(--captured)
fi

# ssh_master keep|reuse USER@HOST:PORT: see TESTINFRA_SSH_MASTER above. Appends the ControlPath to $work/ssh_config.
ssh_master() {
    local mode=$1 login=${2%:*} port=22 control_dir
    [[ "$2" == *:* ]] && port=${2##*:}
    if [[ "$mode" != keep && "$mode" != reuse ]]; then
        echo "testinfra: TESTINFRA_SSH_MASTER=$mode: use keep (before the cleanup) or reuse (after it)" >&2
        exit 2
    fi
    control_dir=${TESTINFRA_CONTROL_DIR:-${XDG_RUNTIME_DIR:-/tmp}/neuron-torch-ssh-$(id -u)}
    [[ -d "$control_dir" ]] || mkdir -m 700 "$control_dir"
    if [[ ! -O "$control_dir" || "$(stat -c %a "$control_dir")" != 700 ]]; then
        echo "testinfra: $control_dir must be a folder of yours with mode 0700 (it holds SSH master sockets)" >&2
        exit 2
    fi
    printf '    ControlPath %s/%%C\n' "$control_dir" >>"$work/ssh_config"
    ssh_to=(ssh -F "$work/ssh_config" -p "$port" "$login")
    if [[ "$mode" == keep ]]; then
        # verify-device runs between the two runs (minutes on a Trn2): an hour idle at most; the keepalives end the
        # master within two minutes once the build instance is gone.
        "${ssh_to[@]}" -o ControlMaster=auto -o ControlPersist=60m -o ServerAliveInterval=30 \
            -o ServerAliveCountMax=4 true
        echo "testinfra: SSH master to $2 kept open for the run after the cleanup"
    elif ! "${ssh_to[@]}" -O check 2>/dev/null; then
        echo "testinfra: no SSH master to $2 (TESTINFRA_SSH_MASTER=reuse): open it before the cleanup with" \
            "TESTINFRA_SSH_MASTER=keep; the cleanup removed the key a new connection would log in with" >&2
        exit 1
    else
        trap '"${ssh_to[@]}" -O exit 2>/dev/null || true; rm -rf "$work"' EXIT
    fi
}

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
    master=${TESTINFRA_SSH_MASTER:-}
    if [[ -n "$master" ]]; then
        ssh_master "$master" "${TESTINFRA_HOSTS#ssh://}"
    fi
fi
echo "testinfra: $TESTINFRA_PYTHON -m pytest ${args[*]}"
"$TESTINFRA_PYTHON" -m pytest "${args[@]}"
