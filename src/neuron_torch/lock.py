"""`neuron-torch lock`: resolve a cell's pins into a hash lock, each package routed to its own index.

Two resolvers write the same format (see lockfile.render_lock): uv (the default) resolves for the cell's Python and
platform from any machine (`--python-version`, `--python-platform`), with every index except the default `explicit`,
so uv consults it only for the packages the matrix assigns to it and the PyPI placeholder `torch-neuronx 1.0` or
PyPI's CUDA torch are never even candidates. pip-tools (`pip-compile --generate-hashes`) resolves for the Python it
runs on, with the indexes as `--index-url`/`--extra-index-url`; its result is accepted only after every hash is
found on the index the release routes the package to (routing.IndexReader), the same check `lock --seal` applies to
a lock a user made with pip-compile.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from neuron_torch.errors import EXIT_FAILED, NeuronTorchError
from neuron_torch.files import (
    check_ca_bundle,
    check_executable,
    check_output_file,
    find_program,
    replace_text,
    tool_env,
)
from neuron_torch.lockfile import Lock, LockedPackage, lock_problems, read_lock, render_lock
from neuron_torch.matrix import Cell, Index, Matrix
from neuron_torch.routing import IndexReader
from neuron_torch.templating import render_template

_UV_HINT = (
    "uv is needed to lock and is a dependency of neuron-torch: reinstall the toolkit (`pip install .` in its "
    "checkout), or put uv on PATH, or set NEURON_TORCH_UV"
)


def find_uv() -> str:
    explicit = os.environ.get("NEURON_TORCH_UV")
    if explicit:
        return check_executable(explicit, "NEURON_TORCH_UV")
    found = find_program("uv")
    if found:
        return found
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except ImportError:
        raise NeuronTorchError(_UV_HINT) from None


def find_pip_compile_python(cell: Cell) -> str:
    """An interpreter of the cell's Python that has pip-tools: this one, or python3.X on PATH."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == cell.python:
        candidates = [sys.executable]
    else:
        candidates = [found for found in [find_program(f"python{cell.python}")] if found]
    for python in candidates:
        if subprocess.run([python, "-c", "import piptools"], capture_output=True).returncode == 0:
            return python
    raise NeuronTorchError(
        f"--resolver pip-tools resolves for the Python it runs on, and no Python {cell.python} with pip-tools was "
        f"found (looked for {'python' + cell.python} on PATH). Install it (`python{cell.python} -m pip install "
        "pip-tools`), or use the default --resolver uv, which locks every cell from one machine."
    )


def routed_indexes(matrix: Matrix, index_urls: Mapping[str, str] | None) -> tuple[Index, ...]:
    """The matrix's indexes with any URLs the user overrides (mirrors); an unknown index name is an error."""
    overrides = dict(index_urls or {})
    unknown = set(overrides) - {i.name for i in matrix.indexes}
    if unknown:
        raise NeuronTorchError(
            f"unknown index name(s) {', '.join(sorted(unknown))}; the release's indexes are "
            + ", ".join(i.name for i in matrix.indexes)
        )
    return tuple(Index(i.name, overrides.get(i.name, i.url), i.serves) for i in matrix.indexes)


def project_file(matrix: Matrix, cell: Cell, indexes: tuple[Index, ...], offline: bool) -> str:
    """A throwaway pyproject.toml whose dependencies are the cell's pins and whose sources route them."""
    return render_template(
        "uv-project.toml.j2",
        python=cell.python,
        dependencies=[f"{name}=={version}" for name, version in cell.pins.items()],
        offline=offline,
        routed=[(name, matrix.index_for(name).name) for name in cell.pins if not matrix.index_for(name).is_default],
        indexes=indexes,
    )


# What a find-links folder must hold for a resolver to find anything in it: wheels (or source archives).
_DISTRIBUTIONS = ("*.whl", "*.tar.gz", "*.zip")


def _check_inputs(ca_bundle: Path | None, find_links: Path | None) -> None:
    if ca_bundle is not None:
        check_ca_bundle(ca_bundle)
    if find_links is not None and not find_links.is_dir():
        raise NeuronTorchError(f"find-links folder {find_links} does not exist (or is not a folder)")
    if find_links is not None and not any(next(find_links.glob(p), None) for p in _DISTRIBUTIONS):
        raise NeuronTorchError(
            f"find-links folder {find_links} holds no wheels (*.whl) or source archives; download the cell's "
            "packages into it first (`pip download --dest DIR ...`), or lock from the indexes without --find-links"
        )


def lock_cell(
    matrix: Matrix,
    cell: Cell,
    *,
    index_urls: Mapping[str, str] | None = None,
    ca_bundle: Path | None = None,
    find_links: Path | None = None,
    out: Path | None = None,
    resolver: str = "uv",
) -> Path:
    """Resolve the cell and write its lock (default: the cell's lock path). Nothing is written if it fails."""
    target = out or cell.lock_path
    check_target(target)
    indexes = routed_indexes(matrix, index_urls)
    _check_inputs(ca_bundle, find_links)
    if resolver != "pip-tools":
        find_uv()  # before any work: a missing uv (or a wrong $NEURON_TORCH_UV) is named first
    with tempfile.TemporaryDirectory(prefix="neuron-torch-lock-") as work_dir:
        work = Path(work_dir)
        if resolver == "pip-tools":
            packages = resolve_pip_tools(cell, indexes, work, ca_bundle, find_links)
            if find_links is None:
                packages = attribute_sources(matrix, indexes, packages, IndexReader(ca_bundle))
        else:
            packages = resolve_uv(matrix, cell, indexes, work, ca_bundle, find_links)
        offline = find_links.resolve() if find_links is not None else None
        text = render_lock(matrix, cell, indexes, packages, resolver=resolver, find_links=offline)
        _write_checked(matrix, cell, text, target, work)
    return target


def seal_lock(
    matrix: Matrix,
    cell: Cell,
    path: Path,
    *,
    index_urls: Mapping[str, str] | None = None,
    ca_bundle: Path | None = None,
    out: Path | None = None,
) -> Path:
    """Seal a lock made elsewhere (pip-compile --generate-hashes): check that every hash is a file of the package's
    routed index, then rewrite it in neuron-torch's format (metadata, index options, sources, seal)."""
    lock = read_lock(path, cell.id)
    target = out or path
    check_target(target)
    indexes = routed_indexes(matrix, index_urls)
    _check_inputs(ca_bundle, None)
    if lock.cell_id not in (None, cell.id):
        raise NeuronTorchError(f"{path} is the lock of {lock.cell_id}, not {cell.id}: pass --cell {lock.cell_id}")
    offline = lock_problems(lock, matrix, cell)  # what the lock shows without any index: CUDA torch, pins
    if offline:
        raise NeuronTorchError(
            f"{path} cannot be sealed for {cell.id} ({len(offline)} problem(s)):\n  " + "\n  ".join(offline),
            EXIT_FAILED,
        )
    packages = attribute_sources(matrix, indexes, lock.packages, IndexReader(ca_bundle))
    text = render_lock(matrix, cell, indexes, packages, resolver=lock.resolver or "pip-tools")
    with tempfile.TemporaryDirectory(prefix="neuron-torch-seal-") as work_dir:
        _write_checked(matrix, cell, text, target, Path(work_dir))
    return target


def check_routing(
    matrix: Matrix, lock: Lock, *, index_urls: Mapping[str, str] | None = None, ca_bundle: Path | None = None
) -> None:
    """Check an unsealed lock's routing as `--seal` does, writing nothing: every hash a file of its routed index."""
    _check_inputs(ca_bundle, None)
    attribute_sources(matrix, routed_indexes(matrix, index_urls), lock.packages, IndexReader(ca_bundle))


def check_target(target: Path) -> None:
    """The lock's destination must be a file path whose folder can be made (neuron_cell.outputs' check)."""
    check_output_file(target, "--out", "lock.txt")


def _write_checked(matrix: Matrix, cell: Cell, text: str, target: Path, work: Path) -> None:
    """Check the lock's text against the release's rules, then write it with a temporary sibling and a rename."""
    draft = work / target.name
    draft.write_text(text, encoding="utf-8")
    problems = lock_problems(read_lock(draft), matrix, cell)
    if problems:
        raise NeuronTorchError(
            f"the resolved lock for {cell.id} breaks the release's rules, so it was not written:\n  "
            + "\n  ".join(problems),
            EXIT_FAILED,
        )
    replace_text(target, text)


def attribute_sources(
    matrix: Matrix, indexes: tuple[Index, ...], packages: tuple[LockedPackage, ...], reader: IndexReader
) -> tuple[LockedPackage, ...]:
    """Each package with its routed index as source, after checking that the index serves every locked hash."""
    by_name = {index.name: index for index in indexes}
    attributed = []
    problems = []
    for package in packages:
        index = by_name[matrix.index_for(package.name).name]
        foreign = sorted(set(package.hashes) - reader.hashes(index, package.name))
        if foreign:
            problems.append(
                f"{package.name}=={package.version}: {len(foreign)} of its hashes ({foreign[0][:16]}...) are no "
                f"file of the '{index.name}' index ({index.url}), the only index the release lets serve it"
            )
        attributed.append(replace(package, index_url=index.url))
    if problems:
        raise NeuronTorchError(
            "the lock holds files from the wrong index, so it was not sealed or written:\n  "
            + "\n  ".join(problems)
            + "\n"
            "Lock with the default resolver (uv routes each package to its own index), or remove those hashes.",
            EXIT_FAILED,
        )
    return tuple(attributed)


def resolve_uv(
    matrix: Matrix, cell: Cell, indexes: tuple[Index, ...], work: Path, ca_bundle: Path | None, find_links: Path | None
) -> tuple[LockedPackage, ...]:
    uv = find_uv()
    (work / "pyproject.toml").write_text(project_file(matrix, cell, indexes, offline=find_links is not None))
    command = [
        uv, "pip", "compile", "pyproject.toml",
        "--generate-hashes", "--emit-index-annotation", "--no-header", "--quiet",
        "--python-version", cell.python, "--python-platform", cell.os.lock_platform,
        "--no-python-downloads", "-o", "resolved.txt",
    ]  # fmt: skip
    if find_links is not None:
        command += ["--no-index", "--find-links", str(find_links.resolve())]
    _run_resolver(command, work, _tool_env(work, ca_bundle), cell, indexes, "uv pip compile")
    return read_lock(work / "resolved.txt").packages


def resolve_pip_tools(
    cell: Cell, indexes: tuple[Index, ...], work: Path, ca_bundle: Path | None, find_links: Path | None
) -> tuple[LockedPackage, ...]:
    python = find_pip_compile_python(cell)
    # --allow-unsafe: setuptools is a dependency of torch, and --require-hashes wants every dependency in the lock.
    (work / "requirements.in").write_text("".join(f"{name}=={version}\n" for name, version in cell.pins.items()))
    command = [
        python, "-m", "piptools", "compile", "requirements.in", "--generate-hashes", "--allow-unsafe", "--no-header",
        "--no-annotate", "--quiet", "--no-emit-index-url", "--cache-dir", str(work / "cache"), "-o", "resolved.txt",
    ]  # fmt: skip
    if find_links is not None:
        command += ["--no-index", "--find-links", str(find_links.resolve())]
    else:
        command += [arg for i in indexes for arg in ("--index-url" if i.is_default else "--extra-index-url", i.url)]
    env = _tool_env(work, ca_bundle)
    if ca_bundle is not None:
        env["PIP_CERT"] = str(ca_bundle.resolve())
    _run_resolver(command, work, env, cell, indexes, "pip-compile")
    return read_lock(work / "resolved.txt").packages


def _run_resolver(
    command: list[str], work: Path, env: dict[str, str], cell: Cell, indexes: tuple[Index, ...], tool: str
) -> None:
    try:
        result = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
    except OSError as error:  # e.g. $NEURON_TORCH_UV names a file that is not a program
        raise NeuronTorchError(f"could not run {tool} ({command[0]}): {error.strerror}") from None
    if result.returncode != 0:
        gap = "" if cell.os.wheels_available else f"Note: {cell.os.wheels_note}\n"
        offline = "--find-links" in command
        fix = (
            "Check that the --find-links folder holds every package of the cell, for its Python and platform."
            if offline
            else f"Check that the indexes are reachable ({', '.join(i.url for i in indexes)}); behind a proxy "
            "or a TLS-intercepting gateway pass --ca-bundle, or lock offline with --find-links DIR."
        )
        raise NeuronTorchError(
            f"could not lock {cell.id}: {tool} failed:\n{result.stderr.strip()[-2000:]}\n{gap}{fix}", EXIT_FAILED
        )


def _tool_env(work: Path, ca_bundle: Path | None) -> dict[str, str]:
    """The resolver's environment: no user or system uv/pip configuration, so only the matrix decides the sources."""
    env = tool_env(work, keep=("UV_CACHE_DIR",))
    env["XDG_CONFIG_HOME"] = str(work / "config")
    env["UV_NO_PROGRESS"] = "1"
    if ca_bundle is not None:
        env["SSL_CERT_FILE"] = str(ca_bundle.resolve())
    return env
