#!/usr/bin/env bash
# Runs the shared testinfra suite (smoke_tests/infra) against the Packer build target, from the controller.
# Packer's shell-local provisioner sets: RUN_TESTINFRA, TESTINFRA_PYTHON, TESTINFRA_HOSTS, TESTINFRA_TARGET,
# CELL_FILE, LOCK_FILE, REPORT_DIR and, for SSH targets, TESTINFRA_SSH_KEY (the build's private key).
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
if [[ -n "${TESTINFRA_SSH_KEY:-}" ]]; then
    key=$(mktemp)
    trap 'rm -f "$key"' EXIT
    printf '%s\n' "$TESTINFRA_SSH_KEY" >"$key"
    args+=("--ssh-identity-file=$key" --sudo)
    export ANSIBLE_HOST_KEY_CHECKING=False
fi
echo "testinfra: $TESTINFRA_PYTHON -m pytest ${args[*]}"
"$TESTINFRA_PYTHON" -m pytest "${args[@]}"
