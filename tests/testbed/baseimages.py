"""Local Debian base images (`neuron-torch-base:debian12` ...) made with mmdebstrap and `docker import`.

No registry is involved: each image is a minbase Debian with the distro Python, venv, CA certificates, gnupg (for
apt key handling) and sudo (for Ansible as a target). The image carries its cache key as a label, so a second build
with the same inputs is a no-op.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from neuron_torch.matrix import OperatingSystem
from tests.testbed.cache import key

DOCKER = "/usr/bin/docker"
PACKAGES = ("python3", "python3-venv", "ca-certificates", "gnupg", "sudo")
KEY_LABEL = "io.neuron-torch.testbed.key"


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


def image_key(system: OperatingSystem) -> str:
    return key(system.codename, system.base_image, PACKAGES, code=["baseimages.py"])


def current_key(image: str) -> str | None:
    result = subprocess.run(
        [DOCKER, "image", "inspect", "--format", f'{{{{index .Config.Labels "{KEY_LABEL}"}}}}', image],
        capture_output=True,
        text=True,
    )
    return result.stdout.strip() if result.returncode == 0 else None


def build_base(system: OperatingSystem, work: Path) -> bool:
    """Build system.base_image unless an image with the same key exists; return True when it was built."""
    stage_key = image_key(system)
    if current_key(system.base_image) == stage_key:
        return False
    work.mkdir(parents=True, exist_ok=True)
    tarball = work / f"{system.id}.tar"
    command = ["mmdebstrap", "--quiet", "--variant=minbase", f"--include={','.join(PACKAGES)}", "--format=tar"]
    if system.codename != "bookworm":
        # testing and the newest stable may carry Release files whose Valid-Until has lapsed on a snapshot mirror.
        command.append('--aptopt=Acquire::Check-Valid-Until "false"')
    subprocess.run([*command, system.codename, str(tarball), debian_mirror()], check=True)
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
