"""Every trait listed in tests/testbed/traits.toml is read back from what the test bed built, so the list and the
twin cannot drift apart; each trait names its source."""

from __future__ import annotations

import email.parser
import hashlib
import json
import tarfile
import uuid
import zipfile
from pathlib import Path

import pytest

from tests.testbed import baseimages, cgroup2, standalone, traits
from tests.testbed.ami_traits import ami_trait_problems
from tests.testbed.harness import built_testbed, docker, require_docker
from tests.testbed.hosts import Fleet, HostError, needs_cgroup2
from tests.testbed.index import REAL_TORCH_DIR


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(archive.read(name).decode())


def _requires(wheel: Path) -> list[str]:
    return [r.replace(" ", "") for r in _metadata(wheel).get_all("Requires-Dist") or [] if "extra ==" not in r]


def test_every_trait_names_its_source() -> None:
    assert traits.traits()["standalone"]["source"].strip()
    for section in ("wheels", "twins", "container", "ami"):
        for name, trait in traits.traits()[section].items():
            assert trait.get("source", "").strip(), f"traits.toml [{section}.{name}] names no source"


TWIN_SCRIPT = r"""
set -u
. /etc/os-release
echo "os-release ID=$ID ID_LIKE=${ID_LIKE:-} VERSION_ID=$VERSION_ID" \
  "VERSION_CODENAME=$VERSION_CODENAME UBUNTU_CODENAME=${UBUNTU_CODENAME:-}"
echo "passwd $(getent passwd 1000)"
echo "group $(getent group 1000)"
echo "home $(stat -c '%u:%g' "$(getent passwd 1000 | cut -d: -f6)")"
for f in "$@"; do if [ -e "$f" ]; then echo "present $f"; fi; done
"""


@pytest.mark.parametrize("twin_id", ["ubuntu24.04", "ubuntu26.04"])
def test_each_twin_carries_every_container_trait(twin_id: str) -> None:
    require_docker()
    built_testbed()
    twin = traits.traits()["twins"][twin_id]
    container = traits.traits()["container"]
    image = baseimages.twin_base(twin_id)
    assert image == twin["image"]
    absent = container["no_python3"]["absent"]
    run = ["run", "--rm", "--entrypoint", "/bin/sh", image, "-c", TWIN_SCRIPT, "twin", *absent]
    out = docker(*run).stdout
    codename = twin["codename"]
    assert (
        f"os-release ID=ubuntu ID_LIKE=debian VERSION_ID={twin['version']} VERSION_CODENAME={codename} "
        f"UBUNTU_CODENAME={codename}"
    ) in out
    user = container["user"]
    assert f"passwd {user['name']}:x:{user['uid']}:{user['gid']}:Ubuntu:{user['home']}:{user['shell']}" in out
    assert f"group {user['name']}:x:{user['gid']}:" in out
    assert f"home {user['uid']}:{user['gid']}" in out
    assert "present" not in out, f"{image} must hold no python3 (traits.toml [container.no_python3])"
    for trait in ("dpkg_excludes", "apt_docker_clean"):
        text = docker("run", "--rm", "--entrypoint", "/bin/cat", image, container[trait]["path"]).stdout
        assert text.splitlines() == container[trait]["lines"], f"{image}: {container[trait]['path']} differs"


def test_a_host_of_the_26_04_twin_boots_systemd_on_a_cgroup2_hierarchy_of_its_own(tmp_path: Path) -> None:
    """[ami.cgroup2] read back from a fresh host of the Ubuntu 26.04 twin (its systemd refuses this machine's cgroup
    v1): systemd `running`, no failed unit, /sys/fs/cgroup a cgroup2fs; the host's subfolder goes with the host."""
    require_docker()
    trait = traits.traits()["ami"]["cgroup2"]
    try:
        fleet = Fleet(tmp_path, f"nt-cgroup2-{uuid.uuid4().hex[:6]}", baseimages.twin_base("ubuntu26.04"))
        assert needs_cgroup2(fleet.image), f"{fleet.image}: systemd older than {trait['systemd_only_from']}"
        fleet.start("host")
    except HostError as error:
        pytest.fail(str(error))
    container = fleet.hosts["host"].container
    try:
        state = fleet.exec("host", "timeout", "60", "systemctl", "is-system-running", "--wait")
        failed = fleet.exec("host", "systemctl", "list-units", "--failed", "--plain", "--no-legend")
        fs_type = fleet.exec("host", "stat", "-f", "-c", "%T", "/sys/fs/cgroup")
        assert state.stdout.decode().strip() == "running", state.stdout.decode() + failed.stdout.decode()
        assert failed.stdout.decode().strip() == "", failed.stdout.decode()
        assert fs_type.stdout.decode().strip() == trait["fs_type"], fs_type.stdout.decode()
        assert list((cgroup2.ROOT / container).rglob("init.scope")), "systemd made no cgroup in the host's subfolder"
    finally:
        fleet.remove()
    assert not (cgroup2.ROOT / container).exists(), "the host's cgroup2 subfolder outlived it"


def test_torch_requires_are_the_real_wheels() -> None:
    real = sorted(REAL_TORCH_DIR.glob("torch-2.13.0+cpu-cp*.whl"))
    if not real:
        reason = f"no real torch 2.13.0 CPU wheel in {REAL_TORCH_DIR} to compare traits.toml [wheels.torch] with"
        print(f"skipping: {reason}")
        pytest.skip(reason)
    assert list(traits.requires("torch")) == _requires(real[0])


def test_the_served_wheels_carry_the_listed_traits() -> None:
    www = built_testbed().www / "simple"
    for name, trait in traits.traits()["wheels"].items():
        index = "pytorch-cpu" if name == "torch" else "neuron"
        wheels = sorted((www / index / name).glob("*-py3-none-any.whl"))  # the fixtures, not the real cp311 torch
        assert wheels, f"the test bed serves no fixture {name} on its {index} index"
        for wheel in wheels:
            metadata = _metadata(wheel)
            if label := trait.get("local_label"):
                assert metadata["Version"].endswith(f"+{label}"), f"{wheel.name}: no local label +{label}"
            assert _requires(wheel) == list(trait["requires"]), f"{wheel.name}: Requires-Dist differs from traits.toml"


def test_the_interpreter_archive_has_python_build_standalones_layout() -> None:
    """The uv-standalone archive the bed serves: install_only layout (traits.toml [standalone]), nothing that points
    outside it, no EXTERNALLY-MANAGED, and the download metadata naming it with its sha256."""
    www = built_testbed().www / "python"
    metadata = json.loads((www / standalone.METADATA).read_text())
    assert metadata, "the test bed serves no interpreter archive"
    for name, entry in metadata.items():
        python = f"{entry['major']}.{entry['minor']}"
        assert name == f"cpython-{python}.{entry['patch']}-linux-x86_64-gnu" and entry["libc"] == "gnu"
        archive = www / entry["url"].rpartition("/")[2]
        assert hashlib.sha256(archive.read_bytes()).hexdigest() == entry["sha256"]
        with tarfile.open(archive) as tar:
            members = {member.name: member for member in tar.getmembers()}
        for path in traits.traits()["standalone"]["layout"]:
            assert any(n == path.format(v=python) or n.startswith(path.format(v=python) + "/") for n in members), path
        assert not [n for n, m in members.items() if m.issym() and m.linkname.startswith("/")], "absolute links"
        assert not [n for n in members if n.endswith("EXTERNALLY-MANAGED")]
        assert any(n.startswith(f"python/lib/python{python}/ensurepip/_bundled/pip-") for n in members)


class _Result:
    def __init__(self, stdout: str) -> None:
        self.stdout = stdout


class _Thing:
    def __init__(self, present: bool) -> None:
        self.exists = self.is_directory = self.is_installed = present


class FakeAmiHost:
    """A testinfra-like host holding exactly the given paths, packages, users and enabled units."""

    def __init__(self, paths: dict[str, str], packages: set[str], users: set[str], enabled: set[str]) -> None:
        self.paths, self.packages, self.users, self.enabled = paths, packages, users, enabled

    def file(self, path: str) -> _Thing:
        return _Thing(path in self.paths)

    def user(self, name: str) -> _Thing:
        return _Thing(name in self.users)

    def package(self, name: str) -> _Thing:
        return _Thing(name in self.packages)

    def run(self, command: str) -> _Result:
        verb, _, arg = command.rpartition(" ")
        if verb == "cat":
            return _Result(self.paths.get(arg, ""))
        return _Result("enabled\n" if arg in self.enabled else "disabled\n")


def _ami_like() -> FakeAmiHost:
    ami = traits.traits()["ami"]
    paths = {ami["sudo"]["path"]: ami["sudo"]["sudoers"] + "\n", ami["machine_id"]["path"]: "0" * 32}
    paths |= {p: "" for p in [*ami["cloud_init"]["folders"], *ami["ssh_host_keys"]["paths"]]}
    packages = {*ami["kernel"]["packages"], ami["python3"]["package"]}
    return FakeAmiHost(paths, packages, {ami["sudo"]["user"]}, set(ami["timers"]["enabled"]))


def test_the_ami_trait_check_passes_a_host_with_every_trait_and_names_each_missing_one() -> None:
    """ami_trait_problems() is what the systemd + sshd hosts (issue 14) run over a testinfra host; here it runs over
    hosts that carry every [ami] trait, or all but one."""
    assert ami_trait_problems(_ami_like()) == []
    ami = traits.traits()["ami"]
    removals = {
        "timers": lambda h: h.enabled.discard(ami["timers"]["enabled"][1]),
        "kernel": lambda h: h.packages.discard("linux-aws"),
        "sudo": lambda h: h.paths.__setitem__(ami["sudo"]["path"], "ubuntu ALL=(ALL) ALL\n"),
        "cloud_init": lambda h: h.paths.pop(ami["cloud_init"]["folders"][0]),
        "ssh_host_keys": lambda h: h.paths.pop(ami["ssh_host_keys"]["paths"][0]),
        "machine_id": lambda h: h.paths.pop(ami["machine_id"]["path"]),
        "python3": lambda h: h.packages.discard("python3"),
    }
    for trait, remove in removals.items():
        host = _ami_like()
        remove(host)
        problems = ami_trait_problems(host)
        assert len(problems) == 1 and problems[0].startswith(f"[ami.{trait}]"), (trait, problems)
        assert ami[trait]["source"] in problems[0]
