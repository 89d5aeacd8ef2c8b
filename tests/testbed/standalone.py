"""The uv-standalone route's interpreters, served by the test bed: python-build-standalone-style archives made by
repackaging an older Debian suite's python3.X debs (python-archive.sh, run on that suite's twin base), the uv wheel
(real, from PyPI, for `pip install --require-hashes`), and the download metadata uv reads
(UV_PYTHON_DOWNLOADS_JSON_URL, given through the test bed's mirror settings: [python] downloads_json_url).

Archives are cached by content: the key is the script, the suite's base image key and the Python version.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from neuron_torch.matrix import Matrix
from tests.testbed import baseimages
from tests.testbed.cache import HERE, key
from tests.testbed.filelock import write_if_changed
from tests.testbed.traits import traits

SCRIPT = HERE / "python-archive.sh"
METADATA = "download-metadata.json"


def standalone_pythons(matrix: Matrix) -> list[str]:
    """The Pythons of the matrix's uv-standalone cells."""
    return sorted({cell.python for cell in matrix.cells if cell.python_route == "uv-standalone"})


def spec(python: str) -> dict[str, str]:
    """traits.toml's [standalone.pythons."3.X"]: the twin it is built on (an older suite) and the one it runs on."""
    found: dict[str, str] | None = traits()["standalone"]["pythons"].get(python)
    if found is None:
        raise SystemExit(f'testbed: no [standalone.pythons."{python}"] in traits.toml for the uv-standalone cells')
    return found


def archive_key(matrix: Matrix, python: str) -> str:
    base = matrix.operating_system(spec(python)["build_on"]).base_image
    return key(python, base, baseimages.current_key(base), code=["standalone.py", "python-archive.sh"])


def build_archive(matrix: Matrix, python: str, out: Path, downloads: Path) -> Path:
    """Repackage `python` into out/<archive> (with version.txt) on its build_on twin, ensurepip's pip from PyPI."""
    base = matrix.operating_system(spec(python)["build_on"]).base_image
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    command = [baseimages.DOCKER, "run", "--rm", "--name", f"neuron-torch-testbed-python-{os.getpid()}"]
    command += ["-v", f"{SCRIPT}:/python-archive.sh:ro", "-v", f"{out}:/out", base, "/python-archive.sh", python]
    subprocess.run(command, check=True, stdout=sys.stderr)
    full_version = (out / "version.txt").read_text().strip()
    pip = download(f"pip=={(out / 'pip_version.txt').read_text().strip()}", downloads)
    shutil.copy2(pip, out / "python" / "lib" / f"python{python}" / "ensurepip" / "_bundled" / pip.name)
    archive = out / f"cpython-{full_version}+debian-x86_64-unknown-linux-gnu-install_only.tar.gz"
    tar = ["tar", "--sort=name", "--owner=0", "--group=0", "--numeric-owner", "--mtime=@0", "-czf", str(archive)]
    subprocess.run([*tar, "-C", str(out), "python"], check=True)
    shutil.rmtree(out / "python")
    return archive


def download(requirement: str, dest: Path, *platform: str) -> Path:
    """One wheel from PyPI (this machine's pip configuration and local wheels ignored)."""
    name, _, version = requirement.partition("==")
    found = sorted(dest.glob(f"{name}-{version}-*.whl"))
    if not found:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
        env["PIP_CONFIG_FILE"] = os.devnull
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
        command += ["--only-binary", ":all:", "--dest", str(dest), "--implementation", "py", "--python-version", "3.13"]
        command += [arg for p in platform for arg in ("--platform", p)]
        subprocess.run([*command, requirement], check=True, env=env)
        found = sorted(dest.glob(f"{name}-{version}-*.whl"))
    return found[0]


def metadata_entry(archive: Path, full_version: str, url: str) -> tuple[str, dict[str, object]]:
    major, minor, patch = (int(part) for part in full_version.split("."))
    entry: dict[str, object] = {
        "name": "cpython",
        "arch": {"family": "x86_64", "variant": None},
        "os": "linux",
        "libc": "gnu",
        "major": major,
        "minor": minor,
        "patch": patch,
        "prerelease": "",
        "url": url,
        "sha256": hashlib.sha256(archive.read_bytes()).hexdigest(),
        "variant": None,
    }
    return f"cpython-{full_version}-linux-x86_64-gnu", entry


def publish(archives: dict[str, Path], www: Path, base_url: str) -> Path:
    """Copy the archives to www/python/ and write the download metadata naming them under base_url. What is already
    there and the same is left alone (nothing is removed and written again), so a cached build never pulls a file
    from under a download in flight."""
    folder = www / "python"
    folder.mkdir(parents=True, exist_ok=True)
    metadata = {}
    for archive in archives.values():
        write_if_changed(folder / archive.name, archive.read_bytes())
        full_version = (archive.parent / "version.txt").read_text().strip()
        name, entry = metadata_entry(archive, full_version, f"{base_url}/python/{archive.name}")
        metadata[name] = entry
    for stale in set(folder.iterdir()) - {folder / a.name for a in archives.values()} - {folder / METADATA}:
        stale.unlink(missing_ok=True)
    write_if_changed(folder / METADATA, (json.dumps(metadata, indent=2, sort_keys=True) + "\n").encode())
    return folder / METADATA


def download_uv(matrix: Matrix, dest: Path) -> Path:
    """The real uv wheel of the release (manylinux x86_64, from PyPI), checked against the release's sha256."""
    uv = matrix.python_install
    wheel = download(f"uv=={uv.uv}", dest, "manylinux_2_17_x86_64")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != uv.uv_sha256:
        raise SystemExit(f"testbed: {wheel.name} has sha256 {digest}, the release pins uv_sha256 {uv.uv_sha256}")
    return wheel
