"""scripts/field-check.sh: usage errors, and its dry run against the test bed (what CI can prove of the field check)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from neuron_torch.matrix import load_matrix
from tests import REPO_ROOT
from tests.testbed.harness import TEST_MATRIX, built_testbed, require_docker

ROOT = REPO_ROOT
SCRIPT = ROOT / "scripts" / "field-check.sh"


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, timeout=1500)


def test_usage_errors_exit_2_naming_the_problem(tmp_path: Path) -> None:
    unknown = run("--bogus")
    assert unknown.returncode == 2 and "unknown option '--bogus'" in unknown.stderr
    bad_cell = run("--dry-run", "--cell", "nope", "--report", str(tmp_path / "r.json"))
    assert bad_cell.returncode == 2 and "'nope' is not a cell id" in bad_cell.stderr
    assert not (tmp_path / "r.json").exists(), "nothing half-written"
    for option in ("--report", "--cell", "--mirror"):  # bash's own ${2:?} error, exit 1, where the usage says 2
        for missing in ([], [""]):
            no_value = run("--dry-run", option, *missing)
            assert no_value.returncode == 2, no_value.stderr
            assert f"field-check: {option} needs a value; run scripts/field-check.sh --help" in no_value.stderr


def test_relative_paths_are_the_callers_not_the_checkouts(tmp_path: Path) -> None:
    """The script works in the checkout; a relative --report or --mirror still names a file of the folder it was run
    from (here: a folder given as the report is refused, the mirror settings found, a missing one refused)."""
    (tmp_path / "reports").mkdir()
    folder = run("--dry-run", "--report", "reports", cwd=tmp_path)
    assert folder.returncode == 2 and "--report reports is a folder" in folder.stderr.replace(f"{tmp_path}/", "")
    (tmp_path / "mirror.toml").write_text("")
    missing = run("--dry-run", "--mirror", "absent.toml", "--cell", "nope", cwd=tmp_path)
    assert missing.returncode == 2 and "field-check: --mirror absent.toml: no such file" in missing.stderr
    found = run("--dry-run", "--mirror", "mirror.toml", "--cell", "nope", cwd=tmp_path)  # refused later, for the cell
    assert found.returncode == 2 and "'nope' is not a cell id" in found.stderr, found.stderr


def test_the_field_mode_refuses_a_machine_without_neuron_devices() -> None:
    if list(Path("/dev").glob("neuron*")):
        print("skipping: this machine has /dev/neuron* devices; the field mode would run for real")
        return
    done = run("--report", "/dev/null")
    assert done.returncode == 2 and "no /dev/neuron* here" in done.stderr


def test_dry_run_locks_builds_runs_and_reports_every_step(tmp_path: Path) -> None:
    require_docker()
    built_testbed()
    report_file = tmp_path / "report.json"
    done = run("--dry-run", "--report", str(report_file))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(report_file.read_text())
    assert report["passed"] and report["cell"] == "2.13-py3.11-debian12"
    assert [s["step"] for s in report["steps"]] == ["lock", "build-image", "verify-device"]
    assert all(s["passed"] for s in report["steps"])
    assert set(report["versions"]) == {cell.id for cell in load_matrix(TEST_MATRIX).cells}, "every cell is locked"
    for versions in report["versions"].values():
        assert versions["neuronx-cc"] == "2.28.7631.0+f702b353", "the report holds the exact versions resolved"
    assert report["verify_device"] is not None
