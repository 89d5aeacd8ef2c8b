"""neuron_torch.lock without resolving: which uv runs (NEURON_TORCH_UV, PATH, the uv package, else the hint), the
throwaway project and the resolver command lines (online, offline with --find-links, pip-tools with its indexes and
CA), the resolver's clean environment, what happens when it fails or returns a lock that breaks the rules (nothing is
written), and sealing a pip-compile lock against a stand-in index reader. The resolver itself is a stand-in that
writes resolved.txt: no uv run, no network (tests/integration/test_lock.py resolves for real)."""

from __future__ import annotations

import hashlib
import itertools
import subprocess
import sys
import tomllib
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from neuron_torch import lock as locking
from neuron_torch.errors import EXIT_FAILED, NeuronTorchError
from neuron_torch.lockfile import gate_lock, read_lock
from neuron_torch.matrix import Cell, Index, Matrix, canonical_name, load_matrix
from tests import REPO_ROOT

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def sha(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def resolved_text(matrix: Matrix, cell: Cell, sources: bool = True, torch: str | None = None) -> str:
    """A resolver's output for the cell: its pins (a family pattern gets a build number) plus one dependency."""
    pins = {**{n: v.replace("*", "1871") for n, v in cell.pins.items()}, "filelock": "3.16.1"}
    if torch is not None:
        pins["torch"] = torch
    entries = []
    for name, version in pins.items():
        entry = f"{name}=={version} \\\n    --hash=sha256:{sha(name)}\n"
        entries.append(entry + (f"    # from {matrix.index_for(name).url}\n" if sources else ""))
    return "".join(entries)


@dataclass
class FakeResolver:
    """subprocess.run as the resolver sees it: records each call, writes `text` as resolved.txt, exits `code`."""

    text: str
    code: int = 0
    stderr: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        cwd = Path(kwargs["cwd"])
        project = cwd / "pyproject.toml"
        self.calls.append(
            {"command": command, "env": kwargs["env"], "project": project.is_file() and project.read_text()}
        )
        if self.code == 0:
            (cwd / "resolved.txt").write_text(self.text)
        return subprocess.CompletedProcess(command, self.code, "", self.stderr)


@pytest.fixture
def cell(matrix: Matrix) -> Cell:
    return matrix.cell(matrix.release.default_cell)


def stand_in_uv(folder: Path) -> Path:
    """An executable file (what $NEURON_TORCH_UV must name) that is never run: exit 99 if it were."""
    uv = folder / "uv"
    uv.parent.mkdir(parents=True, exist_ok=True)
    uv.write_text("#!/bin/sh\nexit 99\n")
    uv.chmod(0o755)
    return uv


@pytest.fixture
def uv(tmp_path: Path) -> Path:
    return stand_in_uv(tmp_path / "uv-bin")


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch, matrix: Matrix, cell: Cell, uv: Path) -> FakeResolver:
    fake = FakeResolver(resolved_text(matrix, cell))
    monkeypatch.setattr(subprocess, "run", fake)
    monkeypatch.setenv("NEURON_TORCH_UV", str(uv))
    return fake


# --- which uv -----------------------------------------------------------------------------------------------------


def test_neuron_torch_uv_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = stand_in_uv(tmp_path / "opt")
    monkeypatch.setenv("PATH", str(stand_in_uv(tmp_path / "bin").parent))  # another uv on PATH: not taken
    monkeypatch.setenv("NEURON_TORCH_UV", str(mine))
    assert locking.find_uv() == str(mine)
    mine.chmod(0o644)  # named like a flag, checked like one: it must be a program
    with pytest.raises(NeuronTorchError, match=r"^\$NEURON_TORCH_UV='.*/opt/uv': no such executable"):
        locking.find_uv()
    monkeypatch.setenv("NEURON_TORCH_UV", "/nt-none/uv")
    with pytest.raises(NeuronTorchError, match=r"^\$NEURON_TORCH_UV='/nt-none/uv': no such executable"):
        locking.find_uv()


def test_a_relative_uv_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The resolver runs in a work folder: a uv named from the caller's folder (NEURON_TORCH_UV=./uv, or a relative
    PATH entry) is taken as an absolute path, or the run would look for it in the work folder."""
    uv = stand_in_uv(tmp_path / "bin")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NEURON_TORCH_UV", "./bin/uv")
    assert locking.find_uv() == str(uv)
    monkeypatch.delenv("NEURON_TORCH_UV")
    monkeypatch.setenv("PATH", "bin")
    assert locking.find_uv() == str(uv)


def test_uv_on_path_then_the_uv_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEURON_TORCH_UV", raising=False)
    (tmp_path / "bin").mkdir()
    uv = tmp_path / "bin" / "uv"
    uv.write_text("#!/bin/sh\n")
    uv.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert locking.find_uv() == str(uv)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    package = types.ModuleType("uv")
    package.find_uv_bin = lambda: tmp_path / "site" / "uv"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "uv", package)
    assert locking.find_uv() == str(tmp_path / "site" / "uv")


def test_no_uv_anywhere_names_the_fixes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_TORCH_UV", "")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "uv", None)  # import uv raises ImportError
    with pytest.raises(NeuronTorchError, match="uv is needed to lock") as raised:
        locking.find_uv()
    assert "put uv on PATH, or set NEURON_TORCH_UV" in str(raised.value)


# --- indexes, the project file, the target ------------------------------------------------------------------------


def test_routed_indexes_take_overrides_by_name(matrix: Matrix) -> None:
    first = matrix.indexes[0]
    routed = locking.routed_indexes(matrix, {first.name: "https://mirror.example/simple/"})
    assert routed[0] == Index(first.name, "https://mirror.example/simple/", first.serves)
    assert routed[1:] == matrix.indexes[1:]
    assert locking.routed_indexes(matrix, None) == matrix.indexes
    with pytest.raises(NeuronTorchError) as raised:
        locking.routed_indexes(matrix, {"quay": "x", "zed": "y"})
    assert str(raised.value) == (
        f"unknown index name(s) quay, zed; the release's indexes are {', '.join(i.name for i in matrix.indexes)}"
    )


def test_the_project_file_pins_and_routes_the_cell(matrix: Matrix, cell: Cell) -> None:
    project = tomllib.loads(locking.project_file(matrix, cell, matrix.indexes, offline=False))
    assert project["project"]["requires-python"] == f"=={cell.python}.*"
    assert project["project"]["dependencies"] == [f"{name}=={version}" for name, version in cell.pins.items()]
    routed = {name: matrix.index_for(name).name for name in cell.pins if not matrix.index_for(name).is_default}
    assert project["tool"]["uv"]["sources"] == {name: {"index": index} for name, index in routed.items()}
    assert [
        (i["name"], i["url"], i.get("default", False), i.get("explicit", False)) for i in project["tool"]["uv"]["index"]
    ] == [(i.name, i.url, i.is_default, not i.is_default) for i in matrix.indexes]
    offline = tomllib.loads(locking.project_file(matrix, cell, matrix.indexes, offline=True))
    assert "tool" not in offline and offline["project"] == project["project"]


def test_a_target_that_cannot_be_written_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    with pytest.raises(NeuronTorchError, match=r"is a folder; --out names the file to write, e\.g\. .*/lock\.txt"):
        locking.check_target(tmp_path)
    with pytest.raises(NeuronTorchError, match="--out /dev/null is a character device, not a file"):
        locking.check_target(Path("/dev/null"))  # the lock replaced it: a file where the device was
    with pytest.raises(NeuronTorchError, match=r"a-file is a file, so .* cannot be written there"):
        locking.check_target(tmp_path / "a-file" / "lock.txt")
    locking.check_target(tmp_path / "new" / "lock.txt")


# --- locking with the stand-in resolver ---------------------------------------------------------------------------


def test_lock_cell_runs_uv_for_the_cells_python_and_platform(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, matrix: Matrix, cell: Cell, resolver: FakeResolver, uv: Path
) -> None:
    monkeypatch.setenv("UV_INDEX_URL", "https://elsewhere.example/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://elsewhere.example/simple")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    out = locking.lock_cell(matrix, cell, out=tmp_path / "locks" / "lock.txt")
    assert out == tmp_path / "locks" / "lock.txt"
    (call,) = resolver.calls
    command = call["command"]
    assert command[:4] == [str(uv), "pip", "compile", "pyproject.toml"]
    assert command[command.index("--python-version") + 1] == cell.python
    assert command[command.index("--python-platform") + 1] == cell.os.lock_platform
    assert {"--generate-hashes", "--emit-index-annotation", "--no-python-downloads"} <= set(command)
    assert "--no-index" not in command and "--find-links" not in command
    assert call["project"] == locking.project_file(matrix, cell, matrix.indexes, offline=False)
    env = call["env"]
    assert "UV_INDEX_URL" not in env and "PIP_EXTRA_INDEX_URL" not in env  # only the matrix decides the sources
    assert env["UV_CACHE_DIR"] == str(tmp_path / "cache") and env["PIP_CONFIG_FILE"] == "/dev/null"
    assert "SSL_CERT_FILE" not in env
    lock = gate_lock(matrix, cell, out)  # sealed, routed and pinned as every consumer wants
    assert lock.resolver == "uv" and lock.offline is None
    assert not list(out.parent.glob(".*.tmp"))


def test_lock_cell_offline_uses_only_the_wheels_folder(
    tmp_path: Path, matrix: Matrix, cell: Cell, resolver: FakeResolver
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with pytest.raises(NeuronTorchError, match=r"find-links folder .*wheels holds no wheels \(\*\.whl\)"):
        locking.lock_cell(matrix, cell, find_links=wheels, out=tmp_path / "lock.txt")  # an empty folder: refused
    assert resolver.calls == []
    (wheels / "filelock-3.16.1-py3-none-any.whl").write_bytes(b"")  # a folder of the cell's wheels (one stands in)
    resolver.text = resolved_text(matrix, cell, sources=False)
    out = locking.lock_cell(matrix, cell, find_links=wheels, out=tmp_path / "lock.txt")
    command = resolver.calls[0]["command"]
    assert command[-3:] == ["--no-index", "--find-links", str(wheels.resolve())]
    assert "[tool.uv" not in resolver.calls[0]["project"]
    text = out.read_text()
    assert f"# offline: find-links {wheels.resolve()}" in text.splitlines()
    assert "--no-index" in text.splitlines() and "--index-url" not in text
    assert read_lock(out).offline == f"find-links {wheels.resolve()}"
    gate_lock(matrix, cell, out)


def test_inputs_are_checked_before_the_resolver_runs(
    tmp_path: Path, matrix: Matrix, cell: Cell, resolver: FakeResolver
) -> None:
    out = tmp_path / "lock.txt"
    with pytest.raises(NeuronTorchError, match=r"find-links folder .*missing does not exist"):
        locking.lock_cell(matrix, cell, find_links=tmp_path / "missing", out=out)
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    with pytest.raises(NeuronTorchError, match="the CA bundle holds no PEM certificate"):
        locking.lock_cell(matrix, cell, ca_bundle=tmp_path / "ca.pem", out=out)
    with pytest.raises(NeuronTorchError, match="unknown index name"):
        locking.lock_cell(matrix, cell, index_urls={"nope": "x"}, out=out)
    assert resolver.calls == [] and not out.exists()


def test_a_failed_resolve_names_the_cell_the_error_and_the_fixes(
    tmp_path: Path, matrix: Matrix, resolver: FakeResolver
) -> None:
    cell = next(c for c in matrix.cells if not c.os.wheels_available)
    resolver.code, resolver.stderr = 1, "  No solution found when resolving dependencies  "
    out = tmp_path / "lock.txt"
    with pytest.raises(NeuronTorchError) as raised:
        locking.lock_cell(matrix, cell, out=out)
    message = str(raised.value)
    assert raised.value.exit_code == EXIT_FAILED
    assert message.startswith(f"could not lock {cell.id}: uv pip compile failed:\nNo solution found")
    assert f"Note: {cell.os.wheels_note}" in message
    assert f"({', '.join(i.url for i in matrix.indexes)})" in message and "--find-links DIR" in message
    assert not out.exists()


def test_a_resolved_lock_that_breaks_the_rules_is_not_written(
    tmp_path: Path, matrix: Matrix, cell: Cell, resolver: FakeResolver
) -> None:
    cuda = cell.pins["torch"].split("+")[0]
    resolver.text = resolved_text(matrix, cell, torch=cuda)
    out = tmp_path / "lock.txt"
    out.write_text("the previous lock\n")
    with pytest.raises(NeuronTorchError) as raised:
        locking.lock_cell(matrix, cell, out=out)
    assert raised.value.exit_code == EXIT_FAILED
    assert str(raised.value).startswith(f"the resolved lock for {cell.id} breaks the release's rules, so it was not")
    assert f"torch {cuda} is not the CPU build (+cpu)" in str(raised.value)
    assert out.read_text() == "the previous lock\n"


# --- pip-tools and sealing: hashes checked against a stand-in index reader ------------------------------------------


class FakeReader:
    """routing.IndexReader's answers: each package's hashes on its routed index, plus `extra` (index, name) pairs."""

    def __init__(self, matrix: Matrix, extra: dict[tuple[str, str], set[str]] | None = None) -> None:
        self.matrix, self.extra = matrix, extra or {}

    def __call__(self, ca_bundle: Path | None = None) -> FakeReader:
        return self

    def hashes(self, index: Index, name: str) -> set[str]:
        served = {sha(name)} if self.matrix.index_for(name).name == index.name else set()
        return served | self.extra.get((index.name, canonical_name(name)), set())


@pytest.fixture
def reader(monkeypatch: pytest.MonkeyPatch, matrix: Matrix) -> Callable[..., FakeReader]:
    def install(extra: dict[tuple[str, str], set[str]] | None = None) -> FakeReader:
        fake = FakeReader(matrix, extra)
        monkeypatch.setattr(locking, "IndexReader", fake)
        return fake

    install()
    return install


def test_pip_tools_gets_the_indexes_and_the_ca_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, matrix: Matrix, cell: Cell, resolver: FakeResolver,
    reader: Callable[..., FakeReader],
) -> None:  # fmt: skip
    monkeypatch.setattr(locking, "find_pip_compile_python", lambda cell: "/usr/bin/python-with-piptools")
    resolver.text = resolved_text(matrix, cell, sources=False)
    (tmp_path / "ca.pem").write_text(PEM)
    out = locking.lock_cell(matrix, cell, resolver="pip-tools", ca_bundle=tmp_path / "ca.pem", out=tmp_path / "l.txt")
    call = resolver.calls[0]
    command = call["command"]
    assert command[:4] == ["/usr/bin/python-with-piptools", "-m", "piptools", "compile"]
    assert {"--generate-hashes", "--allow-unsafe", "--no-emit-index-url"} <= set(command)
    options = [(a, b) for a, b in itertools.pairwise(command) if a in ("--index-url", "--extra-index-url")]
    assert options == [("--index-url" if i.is_default else "--extra-index-url", i.url) for i in matrix.indexes]
    assert call["env"]["PIP_CERT"] == call["env"]["SSL_CERT_FILE"] == str((tmp_path / "ca.pem").resolve())
    lock = gate_lock(matrix, cell, out)
    assert lock.resolver == "pip-tools"
    assert all(p.index_url == matrix.index_for(p.name).url for p in lock.packages)  # sources attributed


def test_pip_compile_needs_the_cells_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, matrix: Matrix) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    other = next(c for c in matrix.cells if c.python != running)
    with pytest.raises(NeuronTorchError) as raised:
        locking.find_pip_compile_python(other)
    assert f"no Python {other.python} with pip-tools was found (looked for python{other.python} on PATH)" in str(
        raised.value
    )
    test_release = load_matrix(REPO_ROOT / "constraints" / "test-matrix.toml")
    same = next((c for c in test_release.cells if c.python == running), None)
    if same is None:
        pytest.skip(f"the test release has no cell of the running Python {running}")
    monkeypatch.setattr(subprocess, "run", lambda command, **kw: subprocess.CompletedProcess(command, 0))
    assert locking.find_pip_compile_python(same) == sys.executable
    monkeypatch.setattr(subprocess, "run", lambda command, **kw: subprocess.CompletedProcess(command, 1))
    with pytest.raises(NeuronTorchError, match="with pip-tools was found"):
        locking.find_pip_compile_python(same)


def pip_compile_lock(tmp_path: Path, matrix: Matrix, cell: Cell) -> Path:
    path = tmp_path / "pip-compile.txt"
    path.write_text(resolved_text(matrix, cell, sources=False))
    return path


def test_seal_checks_every_hash_and_rewrites_the_lock(
    tmp_path: Path, matrix: Matrix, cell: Cell, reader: Callable[..., FakeReader]
) -> None:
    plain = pip_compile_lock(tmp_path, matrix, cell)
    assert not read_lock(plain).sealed
    sealed = locking.seal_lock(matrix, cell, plain, out=tmp_path / "sealed.txt")
    lock = gate_lock(matrix, cell, sealed)
    assert lock.cell_id == cell.id and lock.resolver == "pip-tools"
    assert {p.name: p.version for p in lock.packages} == {p.name: p.version for p in read_lock(plain).packages}
    assert locking.seal_lock(matrix, cell, plain) == plain  # in place by default
    gate_lock(matrix, cell, plain)


def test_seal_refuses_a_hash_from_another_index(
    tmp_path: Path, matrix: Matrix, cell: Cell, reader: Callable[..., FakeReader]
) -> None:
    plain = pip_compile_lock(tmp_path, matrix, cell)
    routed = next(name for name in cell.pins if not matrix.index_for(name).is_default)
    default = next(i for i in matrix.indexes if i.is_default)
    plain.write_text(plain.read_text().replace(sha(routed), sha("pypi-upload")))
    reader({(default.name, canonical_name(routed)): {sha("pypi-upload")}})  # the same version uploaded to PyPI
    index = matrix.index_for(routed)
    with pytest.raises(NeuronTorchError) as raised:
        locking.seal_lock(matrix, cell, plain, out=tmp_path / "sealed.txt")
    assert raised.value.exit_code == EXIT_FAILED
    message = str(raised.value)
    assert message.startswith("the lock holds files from the wrong index, so it was not sealed or written:")
    assert f"1 of its hashes ({sha('pypi-upload')[:16]}...) are no file of the '{index.name}' index ({index.url})" in (
        message
    )
    assert not (tmp_path / "sealed.txt").exists()
    with pytest.raises(NeuronTorchError, match="the lock holds files from the wrong index"):
        locking.check_routing(matrix, read_lock(plain))


def test_seal_refuses_the_lock_of_another_cell(
    tmp_path: Path, matrix: Matrix, cell: Cell, reader: Callable[..., FakeReader]
) -> None:
    sealed = locking.seal_lock(matrix, cell, pip_compile_lock(tmp_path, matrix, cell), out=tmp_path / "sealed.txt")
    other = next(c for c in matrix.cells if c.id != cell.id)
    with pytest.raises(NeuronTorchError) as raised:
        locking.seal_lock(matrix, other, sealed, out=tmp_path / "other.txt")
    assert str(raised.value) == f"{sealed} is the lock of {cell.id}, not {other.id}: pass --cell {cell.id}"
