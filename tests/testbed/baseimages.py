"""Local base images made with mmdebstrap and `docker import`: no registry is involved.

- `neuron-torch-base:debian12`: a minbase Debian with the distro Python, venv, CA certificates, gnupg (for apt key
  handling) and sudo (for Ansible as a target).
- Ubuntu twins (`neuron-torch-base:ubuntu24.04-twin`, `:ubuntu26.04-twin`): a minbase Debian of the suite named in
  traits.toml given every `[container]` trait of the real ubuntu images (user ubuntu uid/gid 1000 with a home,
  /etc/os-release of Ubuntu, dpkg path excludes, no python3, apt's docker-clean). `twin_base(ID)` builds one for
  whoever builds on it (the systemd + sshd hosts of issue 14).

Each image carries its cache key as a label, so a second build with the same inputs is a no-op.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

from neuron_torch.matrix import OperatingSystem
from tests.testbed.cache import key
from tests.testbed.traits import traits

DOCKER = "/usr/bin/docker"
PACKAGES = ("python3", "python3-venv", "ca-certificates", "gnupg", "sudo")
KEY_LABEL = "io.neuron-torch.testbed.key"
WORK = Path(__file__).resolve().parents[2] / ".testbed" / "work" / "bases"


def debian_mirror() -> str:
    """The Debian archive URL this machine's apt uses (deb.debian.org unless configured otherwise)."""
    for source in sorted(Path("/etc/apt").glob("sources.list*")) + sorted(Path("/etc/apt").glob("sources.list.d/*")):
        if not source.is_file():
            continue
        for line in source.read_text().splitlines():
            words = line.split()
            for word in words:
                if word.startswith("http") and word.rstrip("/").endswith("/debian"):
                    return word
    return "http://deb.debian.org/debian"


def twin_for(image: str) -> dict[str, Any] | None:
    """The traits.toml twin that `image` stands in for; None for a plain Debian base."""
    tag = image.rpartition(":")[2]  # by tag, so that a bed with its own repository name (bench) builds the same twins
    return next((twin for twin in traits()["twins"].values() if twin["image"].rpartition(":")[2] == tag), None)


def _write(path: str, lines: list[str]) -> str:
    """A hook command writing lines to path under the chroot ($1)."""
    return f'mkdir -p "$1{Path(path).parent}" && printf "%s\\n" {" ".join(map(shlex.quote, lines))} > "$1{path}"'


def twin_hooks(twin: dict[str, Any]) -> list[str]:
    """mmdebstrap options that give a minbase Debian the [container] traits of the Ubuntu release `twin`."""
    container = traits()["container"]
    user, excludes, clean = container["user"], container["dpkg_excludes"], container["apt_docker_clean"]
    version, codename = twin["version"], twin["codename"]
    # As Ubuntu's own: nothing in it may say "Debian", since Ansible's distribution facts take any os-release that
    # does for Debian (observed: provision.yml saw the twin as "Debian 24.04" and refused the Ubuntu cell).
    os_release = [
        f'PRETTY_NAME="Ubuntu {version} LTS"',
        'NAME="Ubuntu"',
        f'VERSION_ID="{version}"',
        f'VERSION="{version} ({codename})"',
        f"VERSION_CODENAME={codename}",
        "ID=ubuntu",
        "ID_LIKE=debian",
        f"UBUNTU_CODENAME={codename}",
    ]
    add_user = (
        f'chroot "$1" groupadd --gid {user["gid"]} {user["name"]} && chroot "$1" useradd --uid {user["uid"]} '
        f"--gid {user['gid']} --create-home --home-dir {user['home']} --shell {user['shell']} "
        f"--comment Ubuntu {user['name']}"
    )
    customize = [
        'rm -f "$1/etc/os-release"',
        _write("/usr/lib/os-release", os_release),
        'ln -s ../usr/lib/os-release "$1/etc/os-release"',
        add_user,
        _write(clean["path"], clean["lines"]),
        'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin',
    ]
    return [f"--setup-hook={_write(excludes['path'], excludes['lines'])}"] + [
        f"--customize-hook={hook}" for hook in customize
    ]


def image_key(system: OperatingSystem) -> str:
    """A twin is keyed on its traits and this code; a plain Debian base on its recipe only, so that editing the
    twins does not rebuild the bases that every worktree of this machine shares."""
    twin = twin_for(system.base_image)
    if twin:
        return key(system.codename, system.base_image, twin, traits()["container"], code=["baseimages.py"])
    return key(system.codename, system.base_image, PACKAGES, "minbase --include=PACKAGES")


def current_key(image: str) -> str | None:
    result = subprocess.run(
        [DOCKER, "image", "inspect", "--format", f'{{{{index .Config.Labels "{KEY_LABEL}"}}}}', image],
        capture_output=True,
        text=True,
    )
    return result.stdout.strip() if result.returncode == 0 else None


def build_base(system: OperatingSystem, work: Path = WORK) -> bool:
    """Build system.base_image unless an image with the same key exists; return True when it was built."""
    stage_key = image_key(system)
    if current_key(system.base_image) == stage_key:
        return False
    twin = twin_for(system.base_image)
    suite = twin["debian_suite"] if twin else system.codename
    work.mkdir(parents=True, exist_ok=True)
    tarball = work / f"{system.id}.tar"
    command = ["mmdebstrap", "--quiet", "--variant=minbase", "--format=tar"]
    command += twin_hooks(twin) if twin else [f"--include={','.join(PACKAGES)}"]
    if suite != "bookworm":
        # testing and the newest stable may carry Release files whose Valid-Until has lapsed on a snapshot mirror.
        command.append('--aptopt=Acquire::Check-Valid-Until "false"')
    subprocess.run([*command, suite, str(tarball), debian_mirror()], check=True)
    try:
        changes = [
            'CMD ["/bin/bash"]',
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "ENV LANG=C.UTF-8",
            f"LABEL {KEY_LABEL}={stage_key}",
        ]
        args = [arg for change in changes for arg in ("--change", change)]
        subprocess.run(
            [DOCKER, "import", *args, str(tarball), system.base_image], check=True, stdout=subprocess.DEVNULL
        )
    finally:
        tarball.unlink(missing_ok=True)
    return True


def twin_base(twin_id: str, matrix_path: Path | None = None) -> str:
    """The image tag of the twin of `twin_id` ("ubuntu24.04", "ubuntu26.04"), built first when missing or stale.

    For those who build on a twin (e.g. systemd + sshd hosts carrying the [ami] traits): the twin is described by
    the test release's OS entry of that id (constraints/test-matrix.toml).
    """
    from neuron_torch.matrix import load_matrix

    path = matrix_path or Path(__file__).resolve().parents[2] / "constraints" / "test-matrix.toml"
    system = load_matrix(path).operating_system(twin_id)
    if twin_for(system.base_image) is None:
        raise ValueError(f"{twin_id} is not an Ubuntu twin of the test release (its base is {system.base_image})")
    build_base(system)
    return system.base_image
