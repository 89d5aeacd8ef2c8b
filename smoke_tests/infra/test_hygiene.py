"""What must not be captured into an AMI (or a committed image): run with --captured on a build's final state.

The cleanup provisioner (images/scripts/cleanup.sh) is the last step of every Packer build; these checks prove it ran.
A live host fails them on purpose (it has host keys, a machine-id and logs), so they skip without --captured.
Sources: the EKS and ECS AMI builds and image-builder end with such a cleanup (shared/NEURON-FACTS.md section 13).
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.usefixtures("captured_only")

HOMES = "/root /home/*"


def _found(host: Any, command: str) -> list[str]:
    """The lines a `find`-style shell command prints on the target (stderr and missing paths ignored)."""
    return [line for line in host.run(f"sh -c {command!r}").stdout.splitlines() if line.strip()]


def test_machine_id_is_empty(host: Any) -> None:
    machine_id = host.file("/etc/machine-id")
    content = machine_id.content_string.strip() if machine_id.exists else ""
    assert not content, f"/etc/machine-id holds {content!r}: every instance would share it (empty it at capture)"
    dbus = host.file("/var/lib/dbus/machine-id")
    assert not dbus.exists or dbus.is_symlink or not dbus.content_string.strip(), "/var/lib/dbus/machine-id is set"


def test_no_ssh_host_keys(host: Any) -> None:
    keys = _found(host, "ls -1 /etc/ssh/ssh_host_* 2>/dev/null")
    assert not keys, f"SSH host keys would be shared by every instance: {keys}"


def test_no_authorized_keys(host: Any) -> None:
    keys = _found(host, f"ls -1 {' '.join(h + '/.ssh/authorized_keys' for h in HOMES.split())} 2>/dev/null")
    assert not keys, f"the build's authorized keys are still there: {keys}"


def test_cloud_init_will_run_again(host: Any) -> None:
    state = _found(host, "ls -1d /var/lib/cloud/instance /var/lib/cloud/instances/* /var/lib/cloud/sem/* 2>/dev/null")
    assert not state, f"cloud-init state of the build instance (cloud-init clean): {state}"


def test_no_build_reports_or_provisioning_leftovers(host: Any) -> None:
    paths = "/var/lib/neuron-torch/verify-report.json " + " ".join(
        f"{h}/.ansible {h}/.cache {h}/.bash_history" for h in HOMES.split()
    )
    left = _found(host, f"ls -1d {paths} 2>/dev/null")
    assert not left, f"build reports, Ansible temp folders, caches or shell histories: {left}"


def test_no_package_caches_or_temp_files(host: Any) -> None:
    left = _found(
        host,
        "find /var/lib/apt/lists /var/cache/apt/archives /tmp /var/tmp -mindepth 1 -maxdepth 1 "
        "! -name lock ! -name partial ! -name auxfiles 2>/dev/null",
    )
    assert not left, f"apt lists, .debs or temp files: {left[:20]}"


def test_logs_are_empty(host: Any) -> None:
    left = _found(host, "find /var/log -type f ! -size 0 2>/dev/null")
    assert not left, f"log files with content (the build's logs): {left[:20]}"
