"""`neuron-torch lock`: resolve a cell's pins into a hash lock, each package routed to its own index.

uv resolves for the cell's Python and platform from any machine (`--python-version`, `--python-platform`). Routing
is exact: every index except the default is `explicit`, so uv consults it only for the packages the matrix assigns
to it, and the PyPI placeholder `torch-neuronx 1.0` or PyPI's CUDA torch are never even candidates.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from neuron_torch.errors import EXIT_FAILED, NeuronTorchError
from neuron_torch.lockfile import HEADER, lock_problems, read_lock, seal_block
from neuron_torch.matrix import Cell, Index, Matrix

_UV_HINT = "uv is needed to lock: `pip install 'neuron-torch[lock]'` (or put uv on PATH, or set NEURON_TORCH_UV)"


def find_uv() -> str:
    explicit = os.environ.get("NEURON_TORCH_UV")
    if explicit:
        return explicit
    found = shutil.which("uv")
    if found:
        return found
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except ImportError:
        raise NeuronTorchError(_UV_HINT) from None


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
    dependencies = [f"{name}=={version}" for name, version in cell.pins.items()]
    lines = [
        "[project]",
        'name = "neuron-torch-cell"',
        'version = "0"',
        f'requires-python = "=={cell.python}.*"',
        f"dependencies = {json.dumps(dependencies)}",
    ]
    if offline:
        return "\n".join(lines) + "\n"
    lines.append("[tool.uv.sources]")
    for name in cell.pins:
        index = matrix.index_for(name)
        if not index.is_default:
            lines.append(f'{json.dumps(name)} = {{ index = "{index.name}" }}')
    for index in indexes:
        lines += ["[[tool.uv.index]]", f'name = "{index.name}"', f"url = {json.dumps(index.url)}"]
        lines.append("default = true" if index.is_default else "explicit = true")
    return "\n".join(lines) + "\n"


def lock_cell(
    matrix: Matrix,
    cell: Cell,
    *,
    index_urls: Mapping[str, str] | None = None,
    ca_bundle: Path | None = None,
    find_links: Path | None = None,
    out: Path | None = None,
) -> Path:
    """Resolve the cell and write its lock (default: the cell's lock path). Nothing is written if it fails."""
    target = out or cell.lock_path
    indexes = routed_indexes(matrix, index_urls)
    if ca_bundle is not None and not ca_bundle.is_file():
        raise NeuronTorchError(f"CA bundle {ca_bundle} does not exist; pass a PEM file with --ca-bundle")
    if find_links is not None and not find_links.is_dir():
        raise NeuronTorchError(f"find-links folder {find_links} does not exist")
    uv = find_uv()
    with tempfile.TemporaryDirectory(prefix="neuron-torch-lock-") as work_dir:
        work = Path(work_dir)
        (work / "pyproject.toml").write_text(project_file(matrix, cell, indexes, offline=find_links is not None))
        command = [
            uv, "pip", "compile", "pyproject.toml",
            "--generate-hashes", "--emit-index-annotation", "--no-header", "--quiet",
            "--python-version", cell.python, "--python-platform", cell.os.lock_platform,
            "--no-python-downloads", "-o", "resolved.txt",
        ]  # fmt: skip
        if find_links is not None:
            command += ["--no-index", "--find-links", str(find_links.resolve())]
        result = subprocess.run(command, cwd=work, env=_uv_env(work, ca_bundle), capture_output=True, text=True)
        if result.returncode != 0:
            gap = "" if cell.os.wheels_available else f"Note: {cell.os.wheels_note}\n"
            raise NeuronTorchError(
                f"could not lock {cell.id}: uv pip compile failed:\n{result.stderr.strip()}\n{gap}"
                f"Check that the indexes are reachable ({', '.join(i.url for i in indexes)}); behind a proxy "
                "or a TLS-intercepting gateway pass --ca-bundle, or lock offline with --find-links DIR.",
                EXIT_FAILED,
            )
        resolved = work / "resolved.txt"
        body = resolved.read_text()
        header = [
            HEADER.format(cell=cell.id),
            f"# release: {matrix.release.name}",
            f"# cell: {cell.id}",
            *(f"# index {i.name}: {i.url}" for i in indexes),
        ]
        if find_links is not None:
            header.append(f"# offline: find-links {find_links}")
        draft = work / "lock.txt"
        draft.write_text("\n".join(header) + "\n" + body)
        lock = read_lock(draft)
        draft.write_text(draft.read_text() + seal_block(lock.packages))
        problems = lock_problems(read_lock(draft), matrix, cell)
        if problems:
            raise NeuronTorchError(
                f"the resolved lock for {cell.id} breaks the release's rules, so it was not written:\n  "
                + "\n  ".join(problems),
                EXIT_FAILED,
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = target.with_name(f".{target.name}.tmp")
        shutil.copyfile(draft, staged)
        staged.replace(target)
    return target


def _uv_env(work: Path, ca_bundle: Path | None) -> dict[str, str]:
    """uv's environment: no user or system uv configuration, so only the matrix decides where packages come from."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    env["XDG_CONFIG_HOME"] = str(work / "config")
    env["UV_NO_PROGRESS"] = "1"
    if "UV_CACHE_DIR" in os.environ:
        env["UV_CACHE_DIR"] = os.environ["UV_CACHE_DIR"]
    if ca_bundle is not None:
        env["SSL_CERT_FILE"] = str(ca_bundle.resolve())
    return env
