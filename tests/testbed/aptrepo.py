"""A signed apt repository of small fixture packages with the real names and versions of the matrix.

The signing key is a throwaway made when the repository is built; it never leaves `.testbed/`. The layout is the
Neuron repository's: one suite per OS codename, component `main`, `pool/` shared, versions with a build-hash suffix
(`2.35.30.0-1a2b3c4d5`) so that `name=VERSION*` pins are exercised.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from neuron_torch.matrix import AptPackage, AptRepo

# dpkg-deb clamps member mtimes to this, and the fixture trees are stamped with it, so .debs are byte-identical.
SOURCE_DATE_EPOCH = 1792368000  # 2026-10-19
KEY_FILE = "testbed-archive-key.asc"
KEY_UID = "neuron-torch test bed archive key (throwaway) <testbed@127.0.0.1>"

NEURON_LS = """#!/bin/sh
# neuron-torch test bed fixture of neuron-ls: this machine has no Neuron devices.
for arg in "$@"; do
    case "$arg" in
        -j | --json-output) echo "[]"; exit 0 ;;
        -v | --version) echo "neuron-ls (test bed fixture) {version}"; exit 0 ;;
    esac
done
echo "neuron-ls (test bed fixture {version}): no Neuron devices found."
"""

DKMS_CONF = """# neuron-torch test bed fixture: not a buildable module, no kernel is needed.
PACKAGE_NAME="aws-neuronx"
PACKAGE_VERSION="{version}"
BUILT_MODULE_NAME[0]="neuron"
DEST_MODULE_LOCATION[0]="/kernel/drivers/neuron"
AUTOINSTALL="no"
"""


@dataclass(frozen=True)
class FixtureDeb:
    name: str
    version: str
    architecture: str
    files: tuple[tuple[str, str, int], ...]  # (path, content, mode)

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version}_{self.architecture}.deb"


def deb_version(package: AptPackage) -> str:
    """The repository version: the matrix version plus a stable build-hash suffix, like the real repository."""
    suffix = hashlib.sha256(f"{package.name}={package.version}".encode()).hexdigest()[:9]
    return f"{package.version}-{suffix}"


def fixture_debs(apt: AptRepo) -> list[FixtureDeb]:
    debs = []
    for package in apt.packages:
        version = deb_version(package)
        note = f"neuron-torch test bed fixture of {package.name} {version}\n"
        files: list[tuple[str, str, int]] = [(f"usr/share/doc/{package.name}/FIXTURE", note, 0o644)]
        architecture = "amd64"
        if package.name == "aws-neuronx-tools":
            files.append(("opt/aws/neuron/bin/neuron-ls", NEURON_LS.format(version=version), 0o755))
        elif package.name == "aws-neuronx-runtime-lib":
            files.append(("opt/aws/neuron/lib/libnrt.so.1.fixture", note, 0o644))
        elif package.name == "aws-neuronx-collectives":
            files.append(("opt/aws/neuron/lib/libnccom.so.2.fixture", note, 0o644))
        elif package.name == "aws-neuronx-dkms":
            architecture = "all"
            files.append((f"usr/src/aws-neuronx-{package.version}/dkms.conf", DKMS_CONF.format(version=version), 0o644))
        debs.append(FixtureDeb(package.name, version, architecture, tuple(files)))
    return debs


def build_deb(deb: FixtureDeb, work: Path, out_dir: Path) -> Path:
    tree = work / deb.name
    shutil.rmtree(tree, ignore_errors=True)
    (tree / "DEBIAN").mkdir(parents=True)
    for path, content, mode in deb.files:
        target = tree / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        target.chmod(mode)
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {deb.name}\nVersion: {deb.version}\nArchitecture: {deb.architecture}\n"
        "Maintainer: neuron-torch test bed <testbed@127.0.0.1>\nSection: misc\nPriority: optional\n"
        f"Description: neuron-torch test bed fixture of {deb.name}\n"
        " Small stand-in with the real name and version; it contains no Neuron software.\n"
    )
    for folder, dirs, names in os.walk(tree):
        for name in [*dirs, *names, "."]:
            os.utime(Path(folder) / name, (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH), follow_symlinks=False)
        Path(folder).chmod(0o755)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / deb.filename
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)}
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(tree), str(target)],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    return target


def make_key(gnupg_home: Path, uid: str = KEY_UID) -> str:
    """Create a throwaway, passphrase-less signing key in gnupg_home; return its fingerprint."""
    shutil.rmtree(gnupg_home, ignore_errors=True)
    gnupg_home.mkdir(parents=True, mode=0o700)
    gpg = ["gpg", "--homedir", str(gnupg_home), "--batch", "--quiet"]
    subprocess.run(
        [*gpg, "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "1y"],
        check=True,
    )
    listing = subprocess.run([*gpg, "--with-colons", "--list-secret-keys"], check=True, capture_output=True, text=True)
    return next(line.split(":")[9] for line in listing.stdout.splitlines() if line.startswith("fpr:"))


def export_key(gnupg_home: Path, fingerprint: str, target: Path) -> Path:
    exported = subprocess.run(
        ["gpg", "--homedir", str(gnupg_home), "--batch", "--armor", "--export", fingerprint],
        check=True,
        capture_output=True,
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(exported.stdout)
    return target


def _release(suite_dir: Path, codename: str) -> bytes:
    options = {
        "Origin": "neuron-torch-testbed",
        "Label": "neuron-torch-testbed",
        "Suite": codename,
        "Codename": codename,
        "Components": "main",
        "Architectures": "amd64",
        "Description": "neuron-torch hermetic test bed (fixtures of the Neuron apt repository)",
    }
    args = [arg for field, value in options.items() for arg in ("-o", f"APT::FTPArchive::Release::{field}={value}")]
    return subprocess.run(["apt-ftparchive", *args, "release", str(suite_dir)], check=True, capture_output=True).stdout


def write_repo(debs: list[Path], codenames: list[str], root: Path, gnupg_home: Path, fingerprint: str) -> None:
    """Lay out pool/ and one signed suite per codename under root."""
    shutil.rmtree(root, ignore_errors=True)
    pool = root / "pool" / "main"
    pool.mkdir(parents=True)
    for deb in debs:
        shutil.copy2(deb, pool / deb.name)
    packages = subprocess.run(
        ["apt-ftparchive", "packages", "pool/main"], cwd=root, check=True, capture_output=True
    ).stdout
    gpg = ["gpg", "--homedir", str(gnupg_home), "--batch", "--yes", "--local-user", fingerprint]
    for codename in codenames:
        suite = root / "dists" / codename
        binary = suite / "main" / "binary-amd64"
        binary.mkdir(parents=True)
        (binary / "Packages").write_bytes(packages)
        (binary / "Packages.gz").write_bytes(gzip.compress(packages, mtime=SOURCE_DATE_EPOCH))
        release = _release(suite, codename)
        (suite / "Release").write_bytes(release)
        subprocess.run([*gpg, "--clearsign", "-o", str(suite / "InRelease"), str(suite / "Release")], check=True)
        subprocess.run(
            [*gpg, "--armor", "--detach-sign", "-o", str(suite / "Release.gpg"), str(suite / "Release")], check=True
        )


def build_apt_repo(apt: AptRepo, codenames: list[str], www: Path, work: Path) -> str:
    """Build the signed repository at www/apt (key at www/apt/testbed-archive-key.asc); return the key fingerprint."""
    gnupg_home = work / "gnupg"
    fingerprint = make_key(gnupg_home)
    debs = [build_deb(deb, work / "debroot", work / "debs") for deb in fixture_debs(apt)]
    root = www / "apt"
    write_repo(debs, codenames, root, gnupg_home, fingerprint)
    export_key(gnupg_home, fingerprint, root / KEY_FILE)
    (work / "fingerprint").write_text(fingerprint)
    return fingerprint
