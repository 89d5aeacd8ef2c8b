"""The stage table (neuron_smoke/registry.py) is the only list of stages: a new stage is one module and one row, and
the table's order is the run's and the report's.

The end-to-end tests edit a copy of the neuron_smoke package and run verify-device on it (NEURON_TORCH_SMOKE_DIR) on
the CPU, with stages that take a fraction of a second.
"""

from __future__ import annotations

import difflib
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from neuron_smoke import registry, stage_environment, suite, torchless
from neuron_smoke.cli import parse_options
from neuron_smoke.context import Options
from neuron_smoke.registry import LAUNCHER, MODEL, Entry, check
from neuron_smoke.results import Report
from tests.integration.smoke.conftest import SMOKE_DIR, Run, verify

PACKAGE = SMOKE_DIR / "neuron_smoke"
HELLO = '''"""A stage added by test_registry.py: it records the stages that ran before it."""

from neuron_smoke.context import Context, StageLog


def run(ctx: Context, log: StageLog) -> None:
    log.numbers["ran_before"] = list(ctx.results)
    log.summary = f"hello on {ctx.device}"
'''
HELLO_ROW = '    Entry("hello", "a stage added in one row", "stage_hello:run", after=("device",)),\n'


def copy_package(tmp_path: Path) -> Path:
    """A copy of the suite's folder (the package only), for verify-device to run through NEURON_TORCH_SMOKE_DIR."""
    suite_dir = tmp_path / "suite"
    shutil.copytree(PACKAGE, suite_dir / "neuron_smoke", ignore=shutil.ignore_patterns("__pycache__"))
    return suite_dir


def table_rows(text: str) -> tuple[str, list[str], str]:
    """registry.py's text split into what precedes the table's rows, the rows (one string each, a row ruff wrapped
    over several lines included) and what follows them."""
    start = text.index("TABLE = (\n") + len("TABLE = (\n")
    end = text.index("\n)\n", start) + 1
    rows: list[str] = []
    for line in text[start:end].splitlines(keepends=True):
        if line.startswith("    Entry(") or not rows:
            rows.append(line)
        else:
            rows[-1] += line
    return text[:start], rows, text[end:]


def row_name(row: str) -> str:
    found = re.match(r'\s*Entry\(\s*"([^"]+)"', row)
    assert found, row
    return found.group(1)


def write_rows(suite_dir: Path, rows: list[str]) -> list[str]:
    """Rewrite the copy's table with these rows; the stage names in their order."""
    path = suite_dir / "neuron_smoke" / "registry.py"
    head, _, tail = table_rows(path.read_text())
    path.write_text(head + "".join(rows) + tail)
    return [row_name(row) for row in rows]


def run_copy(suite_dir: Path, base_env: dict[str, str], *args: str, tmp: Path) -> Run:
    return verify({**base_env, "NEURON_TORCH_SMOKE_DIR": str(suite_dir)}, "--device", "cpu", *args, tmp=tmp)


def printed_stages(output: str) -> list[str]:
    """The stage names in the order verify-device printed them (each line printed when its stage ended)."""
    return re.findall(r"^  (?:PASS|FAIL|SKIP)  (\S+)", output, re.MULTILINE)


def junit_names(path: Path) -> list[str]:
    return [str(case.get("name")) for case in ET.parse(path).getroot().findall("testcase")]


def changed_files(original: Path, copy: Path) -> dict[str, list[str]]:
    """Each file of `copy` that differs from `original`, with the lines added and removed ('+'/'-' prefixed)."""
    changes = {}
    for path in sorted(copy.rglob("*.py")):
        rel = path.relative_to(copy)
        before = (original / rel).read_text().splitlines() if (original / rel).exists() else []
        diff = [d for d in difflib.ndiff(before, path.read_text().splitlines()) if d[:1] in "+-"]
        if diff:
            changes[str(rel)] = diff
    return changes


def test_a_new_stage_is_one_module_and_one_row(base_env: dict[str, str], tmp_path: Path) -> None:
    suite_dir = copy_package(tmp_path)
    (suite_dir / "neuron_smoke" / "stage_hello.py").write_text(HELLO)
    _, rows, _ = table_rows((PACKAGE / "registry.py").read_text())
    at = [row_name(r) for r in rows].index("device") + 1
    names = write_rows(suite_dir, [*rows[:at], HELLO_ROW, *rows[at:]])
    changes = changed_files(PACKAGE, suite_dir / "neuron_smoke")
    assert set(changes) == {"stage_hello.py", "registry.py"}
    assert changes["registry.py"] == ["+ " + HELLO_ROW.rstrip("\n")]
    assert names == [*registry.NAMES[:at], "hello", *registry.NAMES[at:]]

    junit = tmp_path / "junit.xml"
    run = run_copy(
        suite_dir, base_env, "--stages", "dtype,hello,device,environment", "--junit", str(junit), tmp=tmp_path
    )
    assert run.returncode == 0, run.output
    assert [s["name"] for s in run.report["stages"]] == names == junit_names(junit) == printed_stages(run.output)
    hello = run.stage("hello")
    assert (hello["status"], hello["title"], hello["summary"]) == ("pass", "a stage added in one row", "hello on cpu")
    assert hello["numbers"]["ran_before"] == ["environment", "device"]  # in its place: after device, before matmul
    assert run.stage("dtype")["status"] == "pass"
    assert {s["reason"] for s in run.report["stages"] if s["status"] == "skip"} == {"not selected (--stages)"}


def test_the_new_stage_is_in_the_help_and_the_choices_and_brings_its_prerequisite(
    base_env: dict[str, str], tmp_path: Path
) -> None:
    suite_dir = copy_package(tmp_path)
    (suite_dir / "neuron_smoke" / "stage_hello.py").write_text(HELLO)
    _, rows, _ = table_rows((PACKAGE / "registry.py").read_text())
    names = write_rows(suite_dir, [*rows, HELLO_ROW])
    shown = run_copy(suite_dir, base_env, "--help", tmp=tmp_path)
    assert shown.returncode == 0 and ", ".join(names) in " ".join(shown.output.split()), shown.output
    unknown = run_copy(suite_dir, base_env, "--stages", "hello,warp", tmp=tmp_path)
    assert unknown.returncode == 2 and f"unknown stage(s) warp; known: {', '.join(names)}" in unknown.output
    alone = run_copy(suite_dir, base_env, "--stages", "environment,hello", tmp=tmp_path)
    assert alone.returncode == 0, alone.output
    assert [s["name"] for s in alone.report["stages"]] == names == printed_stages(alone.output)
    # its row runs it after device: named alone, it brings device (it used to skip, and the run passed with it unrun)
    assert "--stages: also running device, which the stages named run after" in alone.output
    assert alone.stage("device")["status"] == "pass"
    assert alone.stage("hello")["status"] == "pass"
    assert alone.report["options"]["stages"] == ["environment", "device", "hello"]


def test_reordering_the_table_reorders_the_run_and_the_report(base_env: dict[str, str], tmp_path: Path) -> None:
    suite_dir = copy_package(tmp_path)
    _, rows, _ = table_rows((PACKAGE / "registry.py").read_text())
    by_name = {row_name(row): row for row in rows}
    # device before environment (neither needs the other), dtype before matmul (both need only those two)
    order = ["device", "environment", "dtype", *(n for n in by_name if n not in {"device", "environment", "dtype"})]
    names = write_rows(suite_dir, [by_name[n] for n in order])
    assert names == order != list(registry.NAMES)
    junit = tmp_path / "junit.xml"
    run = run_copy(suite_dir, base_env, "--stages", "environment,device,dtype", "--junit", str(junit), tmp=tmp_path)
    assert run.returncode == 0, run.output
    assert [s["name"] for s in run.report["stages"]] == names == junit_names(junit) == printed_stages(run.output)
    assert run.report["options"]["stages"] == ["device", "environment", "dtype"]
    assert [run.stage(n)["status"] for n in names[:3]] == ["pass"] * 3


def test_every_consumer_lists_the_stages_in_the_tables_order() -> None:
    names = list(registry.NAMES)
    assert names == [entry.name for entry in registry.TABLE]
    assert [(s.name, s.title, s.requires) for s in suite.STAGES] == [(e.name, e.title, e.after) for e in registry.TABLE]
    assert list(Options().stages) == names == list(parse_options([])[0].stages)
    assert parse_options(["--stages", "dtype,device,environment"])[0].stages == ("environment", "device", "dtype")
    assert [s.name for s in torchless.report_for(Options(), ImportError("x")).stages] == names
    report = suite.provisional(Report("s", "t", {}, {}, {}, {}), [], None, Options())
    assert [(s.name, s.reason) for s in report.stages] == [(n, "not run yet") for n in names]


def test_the_model_and_the_launcher_are_prepared_for_the_stages_that_need_them() -> None:
    # The groupings come from the needs column: the model is loaded, the launcher started, only for these.
    assert registry.needing(MODEL) == ("model", "fallback", "compile")
    assert registry.needing(LAUNCHER) == ("collectives",)
    with suite.collectives_launcher(Options(device="cpu", stages=("environment", "dtype"))) as launcher:
        assert launcher is None


def test_early_functions_run_only_for_selected_stages(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(stage_environment, "start_pip_check", lambda: calls.append("pip check"))
    registry.start_early(["device", "dtype"])
    assert calls == []
    registry.start_early(["dtype", "environment"])
    assert calls == ["pip check"]


def test_a_row_is_resolved_to_its_stage_module() -> None:
    from neuron_smoke import stage_dtype

    assert registry.resolve("stage_dtype:run") is stage_dtype.run
    with pytest.raises(ModuleNotFoundError, match="stage_warp"):
        registry.resolve("stage_warp:run")


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([Entry("a", "t", "stage_a:run"), Entry("a", "t", "stage_a:run")], "stage a: a second row of this name"),
        ([Entry("b", "t", "stage_b:run", after=("a",)), Entry("a", "t", "stage_a:run")], "after a, which is not an"),
        ([Entry("a", "t", "stage_a:run", needs=("gpu",))], "needs gpu, which is not one of launcher, model"),
        ([Entry("a", "t", "stage_a.run")], "'stage_a.run' is not module:function"),
        ([Entry("a", "t", "stage_a:run", early="stage_a:")], "'stage_a:' is not module:function"),
    ],
)
def test_a_row_that_cannot_run_as_written_is_refused(rows: list[Entry], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        check(rows)
    check(registry.TABLE)


def test_the_readmes_stage_table_follows_the_registry() -> None:
    # smoke_tests/README.md explains each stage by hand: its rows keep the table's order and prerequisites.
    rows = re.findall(r"^\| (\d+) \| (\w+) \| ([-\d, ]+) \|", (SMOKE_DIR / "README.md").read_text(), re.MULTILINE)
    number = {name: int(n) for n, name, _ in rows}
    described = [(name, [int(n) for n in needs.split(",") if n.strip() != "-"]) for _, name, needs in rows]
    assert [int(n) for n, _, _ in rows] == list(range(1, len(rows) + 1))
    assert described == [(e.name, [number.get(a) for a in e.after]) for e in registry.TABLE]
