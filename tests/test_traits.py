"""Every trait listed in tests/testbed/traits.toml is read back from what the test bed built, so the list and the
twin cannot drift apart; each trait names its source."""

from __future__ import annotations

import email.parser
import zipfile
from pathlib import Path

import pytest

from tests.testbed import baseimages, traits
from tests.testbed.harness import built_testbed, docker, require_docker
from tests.testbed.index import REAL_TORCH_DIR


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(archive.read(name).decode())


def _requires(wheel: Path) -> list[str]:
    return [r.replace(" ", "") for r in _metadata(wheel).get_all("Requires-Dist") or [] if "extra ==" not in r]


def test_every_trait_names_its_source() -> None:
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
