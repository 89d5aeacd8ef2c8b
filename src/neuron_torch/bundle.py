"""`neuron-torch bundle`: an offline bundle of one cell, installable with the network off.

The bundle holds the cell's wheels (exactly the files its hash lock allows, for the cell's Python and platform),
the image's apt packages (downloaded through the signed InRelease of the Neuron repository, checked against the
pinned key fingerprint when one is set), a SHA256SUMS file, a manifest.json, the lock and `install.sh`, which any
builder runs (Dockerfile `RUN --mount=type=bind`, Ansible, Packer): it checks the sums, apt-installs the .debs and
pip-installs the wheels with `--no-index --require-hashes`. No CA bundle or proxy credential is written into it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from debian.deb822 import Deb822
from debian.debian_support import Version

import neuron_cell
import neuron_smoke
from neuron_cell.pins import apt_matches
from neuron_torch.cellinfo import cell_record
from neuron_torch.errors import EXIT_FAILED, NeuronTorchError
from neuron_torch.files import check_new_folder, publish_folder, remove_tree, tool_env
from neuron_torch.lockfile import Lock, LockedPackage, gate_lock, read_lock_text, with_pip_options
from neuron_torch.matrix import AptPackage, AptScope, Cell, Matrix, canonical_name
from neuron_torch.mirror import Mirror, redact

INSTALL_SH = Path(__file__).with_name("bundle_install.sh")
SMOKE_HOME = Path(neuron_smoke.__file__).resolve().parent  # verify-device's suite, installed beside this package
# The one apt key fingerprint check (the Dockerfile's keyring stage and the neuron_repo role run it too).
APT_KEY_SH = Path(__file__).with_name("aptkey.sh")


@dataclass(frozen=True)
class BundleFile:
    path: str  # relative to the bundle
    sha256: str
    name: str
    version: str


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class Fetcher:
    """HTTP(S) downloads through the mirror's proxy, trusting the system CAs plus the mirror's extra CA bundle."""

    def __init__(self, mirror: Mirror | None) -> None:
        context = ssl.create_default_context()
        if mirror and mirror.ca_bundle:
            context.load_verify_locations(cafile=str(mirror.ca_bundle))
        handlers: list[urllib.request.BaseHandler] = [urllib.request.HTTPSHandler(context=context)]
        if mirror and (mirror.proxy.http or mirror.proxy.https):
            proxies = {"http": mirror.proxy.http, "https": mirror.proxy.https or mirror.proxy.http}
            handlers.append(urllib.request.ProxyHandler({k: v for k, v in proxies.items() if v}))
        self.opener = urllib.request.build_opener(*handlers)

    def get(self, url: str) -> bytes:
        try:
            with self.opener.open(url, timeout=120) as response:
                data: bytes = response.read()
                return data
        except OSError as error:
            raise NeuronTorchError(f"cannot download {redact(url)}: {error}", EXIT_FAILED) from None


def pip_platforms(lock_platform: str) -> list[str]:
    """`x86_64-manylinux_2_36` -> the manylinux tags pip must accept, newest first (pip does not expand them)."""
    arch, _, libc = lock_platform.partition("-")
    minor = int(libc.rsplit("_", 1)[1]) if libc.startswith("manylinux_2_") else 17
    return [f"manylinux_2_{m}_{arch}" for m in range(minor, 16, -1)] + [f"manylinux2014_{arch}", f"linux_{arch}"]


def _pip_env(mirror: Mirror | None, work: Path) -> dict[str, str]:
    """pip's environment: no user configuration (routing comes from the matrix), the mirror's proxy and CA only."""
    env = tool_env(work, keep=("PIP_CERT",))
    if mirror:
        env.update(mirror.proxy.env())
        if mirror.ca_bundle:
            system = Path(env.get("PIP_CERT") or ssl.get_default_verify_paths().cafile or "")
            combined = work / "ca.pem"  # temporary; never copied into the bundle
            combined.write_bytes((system.read_bytes() if system.is_file() else b"") + mirror.ca_bundle.read_bytes())
            env["PIP_CERT"] = str(combined)
    return env


def download_wheels(matrix: Matrix, cell: Cell, lock: Lock, dest: Path, mirror: Mirror | None) -> list[BundleFile]:
    """Download each locked package from the index the release routes it to, exactly one wheel each, hash-checked."""
    dest.mkdir(parents=True, exist_ok=True)
    groups: dict[str, list[LockedPackage]] = {}
    for package in lock.packages:
        groups.setdefault(matrix.index_for(package.name).url, []).append(package)
    major, minor = cell.python.split(".")
    target = ["--python-version", cell.python, "--implementation", "cp"]
    target += [arg for abi in (f"cp{major}{minor}", "abi3", "none") for arg in ("--abi", abi)]
    target += [arg for platform in pip_platforms(cell.os.lock_platform) for arg in ("--platform", platform)]
    with tempfile.TemporaryDirectory(prefix="neuron-torch-bundle-") as tmp:
        work = Path(tmp)
        env = _pip_env(mirror, work)
        for position, (url, packages) in enumerate(groups.items()):
            requirements = work / f"group{position}.txt"
            requirements.write_text(
                "".join(f"{p.name}=={p.version} " + " ".join(f"--hash=sha256:{h}" for h in p.hashes) + "\n"
                        for p in packages)
            )  # fmt: skip
            command = [
                sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                "--require-hashes", "--index-url", url, "--dest", str(dest), *target, "-r", str(requirements),
            ]  # fmt: skip
            result = subprocess.run(command, env=env, capture_output=True, text=True)
            if result.returncode != 0:
                raise NeuronTorchError(
                    f"cannot download the wheels of {cell.id} from {redact(url)}:\n{result.stderr.strip()}", EXIT_FAILED
                )
    return _match_wheels(lock, dest)


def _match_wheels(lock: Lock, dest: Path) -> list[BundleFile]:
    files = []
    by_hash = {sha256_file(path): path for path in dest.glob("*.whl")}
    for package in lock.packages:
        found = [path for digest, path in by_hash.items() if digest in package.hashes]
        if len(found) != 1:
            raise NeuronTorchError(f"{package.pin}: expected one wheel with a locked hash, found {len(found)}")
        digest = sha256_file(found[0])
        files.append(BundleFile(f"wheels/{found[0].name}", digest, canonical_name(package.name), package.version))
    return files


def _verify_release(fetcher: Fetcher, matrix: Matrix, codename: str, work: Path) -> str:
    """The signed Release text of the suite, verified with the repository key (and its pinned fingerprint)."""
    key = work / "key.asc"
    key.write_bytes(fetcher.get(matrix.apt.key_url))
    keyring = work / "keyring.gpg"
    check = ["sh", str(APT_KEY_SH), "--expect", matrix.apt.key_fingerprint, "--source", redact(matrix.apt.key_url)]
    checked = subprocess.run([*check, "--keyring", str(keyring), str(key)], capture_output=True, text=True)
    if checked.returncode != 0:
        raise NeuronTorchError(checked.stderr.strip(), EXIT_FAILED)
    in_release = work / "InRelease"
    in_release.write_bytes(fetcher.get(f"{matrix.apt.url}/dists/{codename}/InRelease"))
    release = work / "Release"
    verified = subprocess.run(
        ["gpgv", "--keyring", str(keyring), "--output", str(release), str(in_release)], capture_output=True, text=True
    )
    if verified.returncode != 0:
        raise NeuronTorchError(
            f"{matrix.apt.url}/dists/{codename}/InRelease is not signed by the repository key:\n{verified.stderr}",
            EXIT_FAILED,
        )
    return release.read_text()


def _stanzas(text: str) -> list[Deb822]:
    return list(Deb822.iter_paragraphs(text))


# Debian's architecture names for the CPU names of a lock platform (dpkg's cputable: x86_64 is amd64, aarch64 is arm64).
DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


def debian_arch(cell: Cell) -> str:
    """The Debian architecture of a cell's packages, from its lock platform (`x86_64-manylinux_2_39` -> amd64)."""
    cpu = cell.os.lock_platform.partition("-")[0]
    if cpu not in DEBIAN_ARCH:
        raise NeuronTorchError(
            f"{cell.id}: lock platform {cell.os.lock_platform} names CPU {cpu!r}, which has no Debian architecture "
            f"here ({', '.join(f'{k} -> {v}' for k, v in DEBIAN_ARCH.items())}); fix os.{cell.os.id}.lock_platform"
        )
    return DEBIAN_ARCH[cpu]


def newest(stanzas: list[Deb822]) -> Deb822:
    """The stanza with the highest Version in Debian's ordering (2.0-10 is newer than 2.0-9; a string sort says not)."""
    return max(stanzas, key=lambda stanza: Version(stanza["Version"]))


def download_debs(
    matrix: Matrix, cell: Cell, packages: tuple[AptPackage, ...], dest: Path, mirror: Mirror | None
) -> list[BundleFile]:
    """Each package at its pinned version, each file checked against the signed index of the cell's suite."""
    fetcher = Fetcher(mirror)
    dest.mkdir(parents=True, exist_ok=True)
    codename = cell.os.codename
    with tempfile.TemporaryDirectory(prefix="neuron-torch-apt-") as tmp:
        release = _stanzas(_verify_release(fetcher, matrix, codename, Path(tmp)))[0]
    index_path = f"{matrix.apt.component}/binary-{debian_arch(cell)}/Packages"
    sums = {line.split()[2]: line.split()[0] for line in release.get("SHA256", "").splitlines() if line.strip()}
    if index_path not in sums:
        raise NeuronTorchError(f"the signed Release of {codename} does not list {index_path}", EXIT_FAILED)
    index = fetcher.get(f"{matrix.apt.url}/dists/{codename}/{index_path}")
    if hashlib.sha256(index).hexdigest() != sums[index_path]:
        raise NeuronTorchError(f"{index_path} of {codename} does not match its signed checksum", EXIT_FAILED)
    available = _stanzas(index.decode())
    files = []
    for package in packages:
        matches = [
            s
            for s in available
            if s.get("Package") == package.name and apt_matches(package.version, s.get("Version", ""))
        ]
        if not matches:
            raise NeuronTorchError(f"{package.apt_pin} is not in {matrix.apt.url} ({codename})", EXIT_FAILED)
        chosen = newest(matches)
        data = fetcher.get(f"{matrix.apt.url}/{chosen['Filename']}")
        digest = hashlib.sha256(data).hexdigest()
        if digest != chosen["SHA256"]:
            raise NeuronTorchError(f"{chosen['Filename']} does not match its signed checksum", EXIT_FAILED)
        name = Path(chosen["Filename"]).name
        (dest / name).write_bytes(data)
        files.append(BundleFile(f"apt/{name}", digest, package.name, chosen["Version"]))
    return files


def _copy_package(home: Path, dest: Path) -> list[Path]:
    """The package's files (neuron_cell.files: no bytecode) copied under dest; their paths there."""
    copied = []
    for name in neuron_cell.files(home):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(home / name, dest / name)
        copied.append(dest / name)
    return copied


def make_bundle(
    matrix: Matrix, cell: Cell, out: Path, *, mirror: Mirror | None = None, lock_path: Path | None = None,
    scopes: tuple[AptScope, ...] = (AptScope.IMAGE,),
) -> Path:  # fmt: skip
    """Write the offline bundle of the cell to out (which must not exist or be empty); return the manifest path."""
    lock_file = lock_path or cell.lock_path
    lock = gate_lock(matrix, cell, lock_file)
    check_new_folder(out)
    staged = out.parent / f".{out.name}.partial-{os.getpid()}"  # a sibling, renamed into place when complete
    try:
        staged.mkdir(parents=True)
        _write_bundle(matrix, cell, staged, lock, lock_file, mirror, scopes)
        publish_folder(staged, out)
    finally:
        remove_tree(staged)
    return out / "manifest.json"


def _write_bundle(
    matrix: Matrix, cell: Cell, out: Path, lock: Lock, lock_file: Path, mirror: Mirror | None,
    scopes: tuple[AptScope, ...],
) -> None:  # fmt: skip
    wheels = download_wheels(matrix, cell, lock, out / "wheels", mirror)
    apt_packages = tuple(p for p in matrix.apt.packages if p.scope in scopes)
    debs = download_debs(matrix, cell, apt_packages, out / "apt", mirror)
    # pip reads --find-links relative to the lock's folder: `pip install --require-hashes -r lock.txt` works offline.
    lock_text = read_lock_text(lock_file, cell.id)
    (out / "lock.txt").write_text(with_pip_options(lock_text, ["--no-index", "--find-links wheels"]))
    shutil.copyfile(INSTALL_SH, out / "install.sh")
    (out / "install.sh").chmod(0o755)
    # neuron_cell whole: the one lock installation (the image and the python_env role run it too), checked by digest;
    # and the smoke tests, so that install.sh gives the target the verify-device an image and a host have.
    kit = _copy_package(neuron_cell.HOME, out / "neuron_cell")
    suite = _copy_package(SMOKE_HOME, out / "neuron_smoke")
    (out / "cell.json").write_text(json.dumps(cell_record(matrix, cell), indent=2) + "\n")
    manifest = {
        "bundle": 1,
        "release": matrix.release.name,
        "cell": cell.id,
        "python": cell.python,
        "os": {"id": cell.os.id, "codename": cell.os.codename, "base_image": cell.os.base_image},
        "lock": {"path": "lock.txt", "sha256": sha256_file(out / "lock.txt")},
        "apt": {
            "source": redact(matrix.apt.url),
            "key_fingerprint": matrix.apt.key_fingerprint,
            "packages": [f.__dict__ for f in debs],
        },
        "wheels": [f.__dict__ for f in wheels],
        "indexes": {i.name: redact(i.url) for i in matrix.indexes},
        "neuron_cell": neuron_cell.digest(out / "neuron_cell"),
        "neuron_smoke": neuron_cell.digest(out / "neuron_smoke"),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    listed = [*debs, *wheels, BundleFile("lock.txt", sha256_file(out / "lock.txt"), "", "")]
    for listed_name in ("install.sh", "cell.json", *(path.relative_to(out).as_posix() for path in (*kit, *suite))):
        listed.append(BundleFile(listed_name, sha256_file(out / listed_name), "", ""))
    (out / "SHA256SUMS").write_text("".join(f"{f.sha256}  {f.path}\n" for f in sorted(listed, key=lambda f: f.path)))
