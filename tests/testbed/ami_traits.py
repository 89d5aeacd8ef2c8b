"""Reading the [ami] traits of traits.toml back from a host: Canonical's Ubuntu AMIs, as the systemd + sshd hosts of
issue 14 (tests/testbed/hosts.py) imitate them.

`ami_trait_problems(host)` takes a testinfra host (`testinfra.get_host("docker://NAME")`, `ssh://...`, or the
`host` fixture) and returns one line per listed trait the host lacks, naming the trait, what was expected and the
trait's source; an empty list means the host carries every AMI trait. A host test asserts it is empty:

    assert ami_trait_problems(testinfra.get_host(f"docker://{container}")) == []
"""

from __future__ import annotations

from typing import Any

from tests.testbed.traits import traits


def _problem(trait: str, expected: str, source: str) -> str:
    return f"[ami.{trait}] {expected} (source: {source})"


def _sudo(host: Any, trait: dict[str, Any]) -> list[str]:
    problems = []
    if not host.user(trait["user"]).exists:
        problems.append(_problem("sudo", f"user {trait['user']} exists", trait["source"]))
    sudoers = host.file(trait["path"])
    if not (sudoers.exists and trait["sudoers"] in host.run(f"cat {trait['path']}").stdout):
        problems.append(_problem("sudo", f"{trait['path']} holds '{trait['sudoers']}'", trait["source"]))
    return problems


def ami_trait_problems(host: Any) -> list[str]:
    """Each [ami] trait of traits.toml that `host` (a testinfra host) lacks."""
    ami = traits()["ami"]
    problems = _sudo(host, ami["sudo"])
    cloud, timers, kernel = ami["cloud_init"], ami["timers"], ami["kernel"]
    keys, machine_id = ami["ssh_host_keys"], ami["machine_id"]
    problems += [
        _problem("cloud_init", f"folder {f}", cloud["source"])
        for f in cloud["folders"]
        if not host.file(f).is_directory
    ]
    for unit in timers["enabled"]:
        if host.run(f"systemctl is-enabled {unit}").stdout.strip() != "enabled":
            problems.append(_problem("timers", f"{unit} enabled", timers["source"]))
    problems += [
        _problem("kernel", f"package {p} installed", kernel["source"])
        for p in kernel["packages"]
        if not host.package(p).is_installed
    ]
    problems += [_problem("ssh_host_keys", f"{p}", keys["source"]) for p in keys["paths"] if not host.file(p).exists]
    if not host.package(ami["python3"]["package"]).is_installed:
        problems.append(_problem("python3", f"package {ami['python3']['package']} installed", ami["python3"]["source"]))
    if not host.file(machine_id["path"]).exists:
        problems.append(_problem("machine_id", machine_id["path"], machine_id["source"]))
    return problems
