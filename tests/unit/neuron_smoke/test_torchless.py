"""torchless.py: the report for a Python that cannot import torch (the environment stage fails naming the Python and
the import error, every other stage is skipped, exit 1), built without importing torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from neuron_smoke import EXIT_CHECK_FAILED, output, torchless
from neuron_smoke.context import Options
from neuron_smoke.registry import NAMES
from neuron_smoke.results import FAIL, SKIP
from tests import REPO_ROOT


def test_environment_fails_naming_the_python_and_the_rest_are_skipped(tmp_path: Path) -> None:
    report = torchless.report_for(Options(device="cpu"), ImportError("No module named 'torch'"))
    assert [s.name for s in report.stages] == list(NAMES)
    environment = report.stage("environment")
    assert environment.status == FAIL
    assert sys.executable in environment.failures[0] and "No module named 'torch'" in environment.failures[0]
    assert all(s.status == SKIP and "torch" in s.reason for s in report.stages if s.name != "environment")
    assert report.exit_code == EXIT_CHECK_FAILED
    assert report.versions["torch"] == "not importable"
    assert report.device == {"requested": "cpu", "backend": "cpu"}
    output.write_json(report, tmp_path / "r.json")  # written as any other report
    assert json.loads((tmp_path / "r.json").read_text())["summary"] == {"pass": 0, "fail": 1, "skip": len(NAMES) - 1}


def test_selected_stages_are_recorded() -> None:
    report = torchless.report_for(Options(stages=("environment", "dtype")), ImportError("x"))
    assert report.options["stages"] == ["environment", "dtype"]


def test_building_the_report_does_not_import_torch() -> None:
    code = (
        "import sys; from neuron_smoke import torchless; from neuron_smoke.context import Options; "
        "torchless.report_for(Options(), ImportError('x')); print('torch' in sys.modules)"
    )
    env = {"PYTHONPATH": f"{REPO_ROOT / 'src'}:{REPO_ROOT / 'smoke_tests'}", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
