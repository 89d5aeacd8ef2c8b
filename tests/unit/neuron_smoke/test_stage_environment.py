"""stage_environment.py: the versions against the cell's pins (a cell made from what is installed passes; drift,
another Python, packages absent on and off Neuron), the imported torch against its metadata, and `pip check`'s
outcomes (its process replaced by a short Python command)."""

from __future__ import annotations

import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import torch

from neuron_smoke import cells, stage_environment
from neuron_smoke.backends import CPU, NEURON, Backend
from neuron_smoke.context import Context, Options, StageLog
from tests import REPO_ROOT

TORCH = stage_environment.installed_version("torch")


def _ctx(cell: dict[str, Any] | None = None, backend: Backend = CPU, **options: Any) -> Context:
    return Context(options=Options(device=backend.name, cell=cell, cell_source="test", **options), backend=backend)


@pytest.fixture(autouse=True)
def _quick_pip_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stage_environment, "PIP_CHECK", ("-c", "pass"))
    monkeypatch.setattr(stage_environment, "_started", None)


def _pip_check_prints(monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    monkeypatch.setattr(stage_environment, "PIP_CHECK", ("-c", code))


def _python() -> str:
    return ".".join(platform.python_version_tuple()[:2])


def test_installed_version() -> None:
    assert TORCH is not None and TORCH.split("+")[0] == torch.__version__.split("+")[0]
    assert stage_environment.installed_version("no-such-distribution-anywhere") is None


def test_installed_version_reads_what_importlib_parses_for_every_installed_distribution() -> None:
    names = {d.metadata["Name"] for d in metadata.distributions()}
    assert len(names) > 50 and {"torch", "transformers", "safetensors"} <= names
    assert {n: stage_environment.installed_version(n) for n in names} == {n: metadata.version(n) for n in names}


def test_without_a_cell_the_versions_are_recorded_only() -> None:
    log = StageLog()
    stage_environment.run(_ctx(), log)
    assert log.failures == [] and log.advisories == []
    assert log.numbers["cell"] is None and any("pins not checked" in n for n in log.notes)
    assert log.numbers["versions"]["torch"] == TORCH and log.numbers["versions"]["python"] == platform.python_version()
    assert log.numbers["pip_check"] == "ok"
    assert log.numbers["torch_imported"]["version"] == torch.__version__


def test_a_cell_of_what_is_installed_passes_off_neuron() -> None:
    cell = {"id": "c1", "python": _python(), "torch": TORCH, "torch_neuronx": "2.13.3.0.*"}
    log = StageLog()
    stage_environment.run(_ctx(cell), log)
    assert log.failures == []
    assert log.numbers["pins_checked"] == 1 and log.numbers["pin_mismatches"] == []
    assert log.numbers["pinned_not_installed"] == ["torch-neuronx"]  # absent off Neuron: a note
    assert log.summary == "cell c1: 1 pins checked, 0 mismatched"


def test_drift_and_another_python_fail_naming_the_cell() -> None:
    cell = {"id": "c2", "python": "2.7", "torch": "1.0.0"}
    log = StageLog()
    stage_environment.run(_ctx(cell), log)
    assert len(log.failures) == 2 and all(f.startswith("version drift from cell c2: ") for f in log.failures)
    assert f"python {_python()} != 2.7" in log.failures[0]
    assert "torch" in log.failures[1] and "1.0.0" in log.failures[1]
    assert log.summary == "cell c2: 1 pins checked, 2 mismatched"


def test_a_pin_the_record_names_and_locks_alike_is_checked_and_reported_once() -> None:
    """An image's cell record names torch and lists it in `locked` with the same version: drift is one failure, not
    the same line twice."""
    cell = {"id": "c5", "python": _python(), "torch": "1.0.0+cpu", "locked": {"torch": "1.0.0+cpu", "Torch": "1.0.0"}}
    log = StageLog()
    stage_environment.run(_ctx(cell), log)
    assert log.failures == [f"version drift from cell c5: {m}" for m in log.numbers["pin_mismatches"]]
    assert len(log.failures) == 2 and "1.0.0+cpu" in log.failures[0] and "==1.0.0 " in log.failures[1] + " "
    assert log.numbers["pins_checked"] == 2


def test_drift_names_the_fix_and_a_torch_from_pypi_is_told_from_the_cpu_index_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PyPI's Linux torch wheel says `2.14.0` in its metadata where the cell pins the CPU index's `2.14.0+cpu`: the
    same-looking numbers get a note saying which build is installed, and any drift names the lock to install."""
    monkeypatch.setattr(stage_environment, "installed_version", lambda d: "2.14.0" if d == "torch" else None)
    lock = "constraints/locks/2.14-py3.14-ubuntu26.04.txt"
    cell = {"id": "2.14-py3.14-ubuntu26.04", "python": _python(), "torch": "2.14.0+cpu", "lock": lock}
    log = StageLog()
    stage_environment._check_pins(_ctx(cell), log, on_neuron=False)
    assert log.failures == ["version drift from cell 2.14-py3.14-ubuntu26.04: torch 2.14.0 does not satisfy the pin "
                            "torch==2.14.0+cpu"]  # fmt: skip
    fix = [n for n in log.notes if n.startswith("to fix the drift:")]
    assert len(fix) == 1 and "neuron-torch lock --cell 2.14-py3.14-ubuntu26.04" in fix[0]
    assert f"into a venv of Python {_python()}:" in fix[0]
    assert f"pip install --require-hashes -r {lock}" in fix[0]
    assert "torch 2.14.0 has no +cpu label: PyPI's build" in fix[0] and "PyTorch CPU index" in fix[0]


def test_another_python_names_a_venv_of_the_cells_python_and_no_torch_build() -> None:
    log = StageLog()
    stage_environment._check_pins(_ctx({"id": "c7", "python": "2.7", "torch": TORCH}), log, on_neuron=False)
    assert log.failures == [f"version drift from cell c7: python {_python()} != 2.7"]
    fix = [n for n in log.notes if n.startswith("to fix the drift:")]
    assert len(fix) == 1 and "into a venv of Python 2.7:" in fix[0] and "-r LOCK`" in fix[0]
    assert "label" not in fix[0]


def test_a_cell_of_what_is_installed_names_no_fix() -> None:
    log = StageLog()
    stage_environment._check_pins(_ctx({"id": "c6", "python": _python(), "torch": TORCH}), log, on_neuron=False)
    assert log.failures == [] and not any(n.startswith("to fix") for n in log.notes)


def test_on_neuron_the_neuron_packages_are_required() -> None:
    cell = {"id": "c3", "torch": TORCH, "torch_neuronx": "2.13.3.0.*"}
    log = StageLog()
    stage_environment.run(_ctx(cell, NEURON), log)
    missing = sorted(d for d in cells.NEURON_DISTRIBUTIONS if stage_environment.installed_version(d) is None)
    assert missing  # this checkout's test Python has no Neuron packages
    for dist in missing:
        assert f"{dist} is not installed (required on neuron)" in log.failures
    assert any("torch-neuronx not installed (pinned 2.13.3.0.*)" in f for f in log.failures)


def test_an_imported_torch_other_than_the_installed_one_fails() -> None:
    log = StageLog()
    stage_environment._check_imported_torch(log, "0.0.1")
    assert len(log.failures) == 1 and torch.__version__ in log.failures[0] and "0.0.1" in log.failures[0]
    same = StageLog()
    stage_environment._check_imported_torch(same, torch.__version__)
    assert same.failures == []


@pytest.mark.parametrize(
    ("metadata_version", "imported", "fails"),
    [
        ("2.13.0", "2.13.0+cu130", False),  # PyPI's wheel: the label in torch.__version__ only
        ("2.13.0+cpu", "2.13.0+cpu", False),  # the PyTorch CPU index's wheel: in both
        ("2.13.0+cpu", "2.13.0+cu130", True),  # another build
        ("2.13.0", "2.14.0+cu130", True),  # another release
        ("2.13.0a0+gitabc", "2.13.0a0+gitabc", False),  # a source build
    ],
)
def test_the_imported_version_is_matched_as_a_pin_against_the_metadata(
    monkeypatch: pytest.MonkeyPatch, metadata_version: str, imported: str, fails: bool
) -> None:
    """torch 2.13.0 from PyPI (torch-2.13.0-cp312-cp312-manylinux_2_28_x86_64.whl, installed here with uv) has
    `Version: 2.13.0` in its METADATA and `__version__ = '2.13.0+cu130'` in torch/version.py: the stage failed every
    verify-device run on it as two torch installations and skipped the other stages."""
    monkeypatch.setattr(torch, "__version__", imported)
    log = StageLog()
    stage_environment._check_imported_torch(log, metadata_version)
    assert bool(log.failures) is fails, log.failures
    assert not fails or (imported in log.failures[0] and metadata_version in log.failures[0])


def test_a_second_torch_earlier_on_sys_path_fails_naming_both_folders(tmp_path: Path) -> None:
    """The same version in another folder: only where the imported package lies tells the two apart."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text(f"__version__ = {torch.__version__!r}\n")
    code = (
        "from neuron_smoke import stage_environment; from neuron_smoke.context import StageLog; log = StageLog(); "
        "stage_environment._check_imported_torch(log, stage_environment.installed_version('torch')); "
        "print(log.failures)"
    )
    env = {"PYTHONPATH": f"{tmp_path}:{REPO_ROOT / 'src'}:{REPO_ROOT / 'smoke_tests'}", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    installed = Path(torch.__file__).parent.resolve()
    assert "two torch installations" in proc.stdout and str(fake) in proc.stdout and str(installed) in proc.stdout


def test_a_pip_check_problem_is_an_advisory(monkeypatch: pytest.MonkeyPatch) -> None:
    _pip_check_prints(monkeypatch, "print('a 1.0 has requirement b>2'); print('c 2'); raise SystemExit(1)")
    log = StageLog()
    stage_environment._pip_check(_ctx(), log)
    assert log.failures == [] and len(log.advisories) == 1
    assert "a 1.0 has requirement b>2" in log.advisories[0]
    assert log.numbers["pip_check"] == ["a 1.0 has requirement b>2", "c 2"]


def test_a_python_without_pip_is_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    _pip_check_prints(monkeypatch, "import sys; sys.exit('/usr/bin/python: No module named pip')")
    log = StageLog()
    stage_environment._pip_check(_ctx(), log)
    assert log.failures == log.advisories == [] and log.numbers["pip_check"] == "not run"


def test_a_hanging_pip_check_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    _pip_check_prints(monkeypatch, "import time; time.sleep(30)")
    log = StageLog()
    stage_environment._pip_check(_ctx(timeout_s=0.5), log)
    assert log.failures == ["pip check timed out"]


def test_pip_check_started_early_is_collected_once(monkeypatch: pytest.MonkeyPatch) -> None:
    _pip_check_prints(monkeypatch, "raise SystemExit(0)")
    stage_environment.start_pip_check()
    started = stage_environment._started
    assert started is not None and started.args[0] == sys.executable
    stage_environment.start_pip_check()  # a second call starts nothing
    assert stage_environment._started is started
    log = StageLog()
    stage_environment._pip_check(_ctx(), log)
    assert stage_environment._started is None and started.returncode == 0 and log.numbers["pip_check"] == "ok"
