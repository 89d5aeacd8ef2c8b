"""Locks that pip-tools users recognise, tried for real against the test bed: `pip install --require-hashes -r LOCK`
and `pip-sync LOCK` take a `neuron-torch lock` as it is, `lock --resolver pip-tools` runs pip-compile, and a lock
made by pip-compile itself passes `check` as pip wrote it (unsealed, said so), is refused by the consumers' lock gate
until `lock --seal` seals it, and is accepted once sealed.

These install the test cell's real CPU torch into throwaway venvs (pip's download cache is shared between them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from importlib import metadata
from pathlib import Path

import pytest

from neuron_torch.cli import main
from neuron_torch.lockfile import read_lock
from neuron_torch.matrix import Matrix, canonical_name
from neuron_torch.routing import project_url
from tests.testbed.harness import CELL, TEST_MATRIX, built_testbed

BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{path} is missing: scripts/dev-setup.sh installs pip-tools (a dependency of neuron-torch)")
    return str(path)


def pip_env(cache: Path) -> dict[str, str]:
    """A user's plain pip: no configuration of this machine, nothing but what the lock says."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_CACHE_DIR": str(cache)}


def venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, capture_output=True)
    return path / "bin" / "python"


def installed(python: Path) -> dict[str, str]:
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
        check=True,
        capture_output=True,
        text=True,
    )
    return {canonical_name(p["name"]): p["version"] for p in json.loads(listed.stdout)}


def locked(path: Path) -> dict[str, str]:
    return {canonical_name(p.name): p.version for p in read_lock(path).packages}


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["--matrix", str(TEST_MATRIX), *argv])
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.fixture(scope="module")
def pip_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pip-cache")


@pytest.fixture(scope="module")
def bed_lock() -> Path:
    bed = built_testbed()
    return bed.matrix.cell(CELL).lock_path


def test_the_lock_carries_the_index_lines_pip_compile_emits(bed_lock: Path) -> None:
    bed = built_testbed()
    text = bed_lock.read_text()
    urls = {index.name: index.url for index in bed.matrix.indexes}
    options = [line for line in text.splitlines() if line.startswith("--")]
    assert options == [
        f"--index-url {urls['pypi']}",
        f"--extra-index-url {urls['neuron']}",
        f"--extra-index-url {urls['pytorch-cpu']}",
    ]
    assert f"    # from {urls['neuron']}" in text  # the routing `check` verifies stays recorded


def test_plain_pip_and_pip_sync_install_the_lock_as_written(bed_lock: Path, tmp_path: Path, pip_cache: Path) -> None:
    python = venv(tmp_path / "venv")
    # pip-sync refuses a target whose pip is older than the one its pip-tools requires (pip-tools 7.7: pip>=26.2.2;
    # `python -m venv` seeds the interpreter's bundled pip). A pip-tools user upgrades it first, as here, with this
    # machine's pip configuration: the lock's indexes do not carry pip.
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"pip=={metadata.version('pip')}"], check=True)
    result = subprocess.run(
        # --no-compile here and for pip-sync: the test checks what pip installs, not the bytecode it would compile
        # after (about 60 CPU-seconds for the real torch, sympy and networkx, and again for what pip-sync reinstalls).
        [str(python), "-m", "pip", "install", "--no-compile", "--require-hashes", "-r", str(bed_lock)],
        env=pip_env(pip_cache),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    have = installed(python)
    for name, version in locked(bed_lock).items():
        assert have.get(name) == version, (name, version, have.get(name))
    assert not any(name.startswith("nvidia") for name in have)
    # pip-sync on the same venv with two locked packages removed: it must fetch them from the lock's own indexes.
    subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", "sympy", "mpmath"], check=True)
    result = subprocess.run(
        [tool("pip-sync"), "--python-executable", str(python), "--pip-args", "--no-compile", str(bed_lock)],
        env=pip_env(tmp_path / "empty-cache"),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert installed(python) == have


def test_lock_with_the_pip_tools_resolver_matches_the_uv_lock(
    capsys: pytest.CaptureFixture[str], bed_lock: Path, tmp_path: Path
) -> None:
    tool("pip-compile")
    out = tmp_path / "pip-tools.txt"
    code, output = run_cli(capsys, "lock", "--cell", CELL, "--resolver", "pip-tools", "--out", str(out))
    assert code == 0, output
    assert "# resolver: pip-tools" in out.read_text()
    assert locked(out) == locked(bed_lock)
    assert run_cli(capsys, "check", "--lock", str(out), "--cell", CELL)[0] == 0


def pip_compile(matrix: Matrix, cell: str, work: Path, cache: Path) -> Path:
    """What a pip-tools user runs: pip-compile --generate-hashes with the cell's pins and the release's indexes as pip
    options (on this interpreter: the test bed's wheels carry no Python markers, so any Python resolves the same)."""
    source = work / "requirements.in"
    source.write_text("".join(f"{name}=={version}\n" for name, version in matrix.cell(cell).pins.items()))
    indexes = [arg for i in matrix.indexes for arg in ("--index-url" if i.is_default else "--extra-index-url", i.url)]
    out = work / "requirements.txt"
    result = subprocess.run(
        [tool("pip-compile"), "--generate-hashes", "--allow-unsafe", "--emit-index-url",
         "--cache-dir", str(work / "cache"), *indexes, "-o", str(out), str(source)],
        env=pip_env(cache), capture_output=True, text=True, cwd=work,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def user_lock(bed_lock: Path, tmp_path_factory: pytest.TempPathFactory, pip_cache: Path) -> str:
    out = pip_compile(built_testbed().matrix, CELL, tmp_path_factory.mktemp("pip-compile"), pip_cache)
    assert locked(out) == locked(bed_lock)
    return out.read_text()


def test_a_pip_compile_lock_is_checked_sealed_and_accepted(
    capsys: pytest.CaptureFixture[str], bed_lock: Path, user_lock: str, tmp_path: Path
) -> None:
    lock = tmp_path / "requirements.txt"
    lock.write_text(user_lock)
    seal = f"`neuron-torch --matrix {TEST_MATRIX} lock --seal {lock} --cell {CELL}`"
    code, output = run_cli(capsys, "check", "--lock", str(lock), "--cell", CELL)  # accepted as pip wrote it
    assert code == 0, output
    assert f"{lock}: a sound lock of {CELL} (every hash is a file of its routed index), not sealed" in output
    assert seal in output and "problem" not in output, output
    # The consumers' gate refuses it until it is sealed, naming the command that seals it.
    for argv in (["check", "--sealed"], ["build", "image", "--dry-run"]):
        code, output = run_cli(capsys, *argv[:-1], "--lock", str(lock), "--cell", CELL, argv[-1])
        assert code == 1 and "refusing the lock" in output and f"{lock}: not sealed" in output, output
        assert seal in output, output
    assert lock.read_text() == user_lock
    code, output = run_cli(capsys, "lock", "--seal", str(lock), "--cell", CELL)
    assert code == 0 and "sealed" in output, output
    assert locked(lock) == locked(bed_lock)
    assert "--extra-index-url" in lock.read_text() and "# seal torch==2.13.0+cpu" in lock.read_text()
    assert run_cli(capsys, "check", "--lock", str(lock), "--cell", CELL) == (
        0,
        f"{lock}: a sound, sealed lock of {CELL}\n",
    )
    code, output = run_cli(capsys, "build", "image", "--cell", CELL, "--lock", str(lock), "--dry-run")
    assert code == 0 and "docker" in output, output  # the consumers' lock gate takes it


def test_seal_refuses_a_hash_that_is_not_a_file_of_the_routed_index(
    capsys: pytest.CaptureFixture[str], user_lock: str, tmp_path: Path
) -> None:
    bed = built_testbed()
    pypi = next(index for index in bed.matrix.indexes if index.name == "pypi")
    with urllib.request.urlopen(project_url(pypi.url, "torch"), timeout=10) as response:
        cuda_torch = re.findall(r"#sha256=([0-9a-f]{64})", response.read().decode())[0]
    lock = tmp_path / "requirements.txt"
    text = user_lock
    first_torch_hash = re.search(r"^torch==\S+ \\\n\s+--hash=sha256:[0-9a-f]{64}", text, re.MULTILINE)
    assert first_torch_hash is not None
    lock.write_text(text.replace(first_torch_hash[0], first_torch_hash[0] + f" \\\n    --hash=sha256:{cuda_torch}"))
    before = lock.read_text()
    for argv in (["lock", "--seal", str(lock)], ["check", "--lock", str(lock)]):  # check reads the routing too
        code, output = run_cli(capsys, *argv, "--cell", CELL)
        assert code == 1, output
        assert "torch==2.13.0+cpu: 1 of its hashes" in output and "'pytorch-cpu' index" in output, output
    assert lock.read_text() == before  # nothing written
    assert not list(tmp_path.glob(".*.tmp"))


def test_pip_compile_lock_without_pip_tools_python_names_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("python3.14"):
        pytest.skip("python3.14 is on PATH here, so the missing-interpreter message cannot be shown")
    code, output = run_cli(capsys, "lock", "--cell", "2.13-py3.14-ubuntu26.04", "--resolver", "pip-tools", "--out", "x")
    assert code == 2
    assert "no Python 3.14 with pip-tools" in output and "--resolver uv" in output
    assert not Path("x").exists()
