"""`python3 -m tests.testbed build|serve|stop|status`: the hermetic test bed, from nothing, on loopback only.

build   builds (or reuses, by content key) the signed apt repository, the three PEP 503 indexes, the Debian base
        images and the test cells' hash locks, then serves them on http://127.0.0.1:38080.
serve   (re)starts the server over .testbed/www; stop stops it; status says whether it serves.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from neuron_torch import lock as neuron_lock
from neuron_torch import lockfile as neuron_lockfile
from neuron_torch.matrix import Cell, Matrix, load_matrix
from tests.testbed import aptrepo, baseimages, folder, index, locks, server, standalone
from tests.testbed.cache import Stamps, key
from tests.testbed.filelock import exclusive, write_if_changed
from tests.testbed.traits import traits

ROOT = Path(__file__).resolve().parents[2]
# Another folder for a second bed beside this checkout's (scripts/bench-testbed.sh); the tests read the same variable.
TESTBED = folder()
WWW = TESTBED / "www"
WORK = TESTBED / "work"
PID_FILE = TESTBED / "server.pid"
LOG = TESTBED / "server.log"
BUILD_LOCK = TESTBED / "build.lock"  # one build at a time: test processes side by side each ask for the bed
MIRROR_FILE = TESTBED / "mirror.toml"
DEFAULT_MATRIX = ROOT / "constraints" / "test-matrix.toml"


def _timed(label: str, fresh: bool, build: Callable[[], object]) -> None:
    if fresh:
        print(f"testbed: {label}: cached")
        return
    started = time.monotonic()
    build()
    print(f"testbed: {label}: built in {time.monotonic() - started:.1f} s")


def docker_works() -> bool:
    if not Path(baseimages.DOCKER).exists():
        return False
    return subprocess.run([baseimages.DOCKER, "info"], capture_output=True).returncode == 0


def build_apt(matrix: Matrix, stamps: Stamps) -> None:
    codenames = sorted({system.codename for system in matrix.os.values()})
    stage_key = key(matrix.apt, codenames, code=["aptrepo.py"])
    fresh = stamps.fresh("apt", stage_key, WWW / "apt" / aptrepo.KEY_FILE, WORK / "apt" / "fingerprint")

    def build() -> None:
        aptrepo.build_apt_repo(matrix.apt, codenames, WWW, WORK / "apt")
        stamps.mark("apt", stage_key)

    _timed("apt repository", fresh, build)


def build_indexes(matrix: Matrix, stamps: Stamps) -> None:
    real = [(p.name, p.stat().st_size) for p in index.real_torch_wheels(matrix)]
    inputs = (matrix.indexes, matrix.families, matrix.packages, real, index.TORCH_DEPENDENCIES, matrix.python_install)
    stage_key = key(*inputs, code=["index.py", "wheels.py", "pep503.py", "traits.py", "traits.toml", "standalone.py"])
    fresh = stamps.fresh("indexes", stage_key, *(WWW / "simple" / i.name / "index.html" for i in matrix.indexes))

    def build() -> None:
        index.build_indexes(matrix, WWW, WORK / "index")
        stamps.mark("indexes", stage_key)
        stamps.forget("locks")

    _timed("pip indexes", fresh, build)
    if not real:
        print("testbed: note: no real CPU torch wheel in /opt/wheels; every cell gets the fixture torch")


def build_bases(matrix: Matrix, wanted: list[str]) -> None:
    if not docker_works():
        print(f"testbed: base images: skipped ({baseimages.DOCKER} cannot reach dockerd; run scripts/ci-prereqs.sh)")
        return
    for os_id in wanted:
        system = matrix.operating_system(os_id)
        fresh = baseimages.current_key(system.base_image) == baseimages.image_key(system)
        _timed(f"base image {system.base_image}", fresh, lambda s=system: baseimages.build_base(s, WORK / "bases"))


def build_pythons(matrix: Matrix, stamps: Stamps) -> None:
    """The uv-standalone cells' interpreter archives (on their build_on twin) and the download metadata naming them."""
    pythons = standalone.standalone_pythons(matrix)
    if not pythons or not docker_works():
        return
    archives = {}
    for python in pythons:
        builder = matrix.operating_system(standalone.spec(python)["build_on"])
        if baseimages.current_key(builder.base_image) != baseimages.image_key(builder):
            build_bases(matrix, [builder.id])  # the archive is made on that twin (even with --bases debian12)
        out = WORK / "python" / python
        stage_key = standalone.archive_key(matrix, python)
        fresh = stamps.fresh(f"python-{python}", stage_key, out / "version.txt") and any(out.glob("*.tar.gz"))

        def build(p: str = python, o: Path = out, k: str = stage_key) -> None:
            standalone.build_archive(matrix, p, o, WORK / "index" / "downloads" / "tools")
            stamps.mark(f"python-{p}", k)

        _timed(f"interpreter archive {python}", fresh, build)
        archives[python] = next(out.glob("*.tar.gz"))
    standalone.publish(archives, WWW, server.base_url())


def build_locks(matrix: Matrix, stamps: Stamps) -> None:
    indexes_key = stamps.folder.joinpath("indexes.key").read_text()
    uv_cache = WORK / "uv-cache" / indexes_key
    for stale in (WORK / "uv-cache").glob("*"):
        if stale != uv_cache:
            shutil.rmtree(stale)
    for cell in matrix.cells:
        stage_key = key(
            cell.pins,
            cell.python,
            cell.os.lock_platform,
            indexes_key,
            *(Path(module.__file__ or "").read_bytes() for module in (neuron_lock, neuron_lockfile)),  # the format
            code=["locks.py"],
        )
        fresh = stamps.fresh(f"lock-{cell.id}", stage_key, cell.lock_path)

        def build(c: Cell = cell, k: str = stage_key) -> None:
            locks.compile_lock(matrix, c, uv_cache)
            stamps.mark(f"lock-{c.id}", k)

        _timed(f"lock {cell.id}", fresh, build)


def write_mirror_file(matrix: Matrix) -> None:
    """The test bed's mirror settings: the test release's URLs with the throwaway key's fingerprint pinned."""
    fingerprint = (WORK / "apt" / "fingerprint").read_text().strip()
    indexes = "".join(f'{index.name} = "{index.url}"\n' for index in matrix.indexes)
    python = ""
    if standalone.standalone_pythons(matrix):
        python = f'\n[python]\ndownloads_json_url = "{server.base_url()}/python/{standalone.METADATA}"\n'
    # The real release's Ubuntu bases (Docker Hub's ubuntu:24.04 and :26.04, which CI cannot reach) are the twins here
    # (traits.toml [twins]): as a user's registry mirror maps them, so `build image` of a real cell runs as written.
    real = load_matrix(ROOT / "constraints" / "matrix.toml")
    twins = traits()["twins"]
    images = "".join(f'"{real.os[i].base_image}" = "{twins[i]["image"]}"\n' for i in sorted(twins) if i in real.os)

    text = (
        "# Written by tests/testbed: the loopback test bed as a mirror (see docs/mirrors.md).\n"
        f'[apt]\nurl = "{matrix.apt.url}"\nkey_url = "{matrix.apt.key_url}"\nkey_fingerprint = "{fingerprint}"\n\n'
        f"[indexes]\n{indexes}{python}\n[images]\n{images}"
    )
    write_if_changed(MIRROR_FILE, text.encode())  # readers in other test processes never see it half-written


def serve() -> None:
    pid = server.start(WWW, PID_FILE, LOG)
    url = server.base_url()
    print(f"testbed: serving {WWW} on {url} (pid {pid}, pid file {PID_FILE}, log {LOG})")
    print(f"testbed:   apt repository  {url}/apt  (key {url}/apt/{aptrepo.KEY_FILE})")
    for name in sorted(p.name for p in (WWW / "simple").iterdir() if p.is_dir()):
        print(f"testbed:   pip index       {url}/simple/{name}/")
    print(f"testbed:   mirror settings {MIRROR_FILE}")


def build(matrix: Matrix, bases: str) -> None:
    for tool in ("gpg", "dpkg-deb", "apt-ftparchive"):
        if not shutil.which(tool):
            raise SystemExit(f"testbed: {tool} is missing; run scripts/ci-prereqs.sh")
    stamps = Stamps(TESTBED / "cache")
    WWW.mkdir(parents=True, exist_ok=True)
    build_apt(matrix, stamps)
    build_indexes(matrix, stamps)
    write_mirror_file(matrix)
    wanted = list(matrix.os) if bases == "all" else [] if bases == "none" else bases.split(",")
    build_bases(matrix, wanted)
    build_pythons(matrix, stamps)
    serve()
    build_locks(matrix, stamps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="testbed", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("command", choices=["build", "serve", "stop", "status"], nargs="?", default="build")
    parser.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX, help="the test release (default: %(default)s)")
    parser.add_argument(
        "--bases",
        default="all",
        help="base images to build: all (default), none, or os ids separated by commas (debian12,debian13)",
    )
    args = parser.parse_args(argv)
    matrix = load_matrix(args.matrix)
    started = time.monotonic()
    if args.command == "build":
        with exclusive(BUILD_LOCK):
            build(matrix, args.bases)
        print(f"testbed: ready in {time.monotonic() - started:.1f} s")
    elif args.command == "serve":
        serve()
    elif args.command == "stop":
        print("testbed: stopped" if server.stop(PID_FILE) else "testbed: was not running")
    else:
        pid = server.status(WWW, PID_FILE)
        print(f"testbed: serving on {server.base_url()} (pid {pid})" if pid else "testbed: not serving")
        return 0 if pid else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
