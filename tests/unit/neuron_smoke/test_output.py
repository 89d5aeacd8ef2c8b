"""output.py: the printed stage lines, header and footer, and the JSON and JUnit files (written whole, no temporary
file left beside them)."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

from neuron_smoke import output
from neuron_smoke.results import FAIL, PASS, SCHEMA, SKIP, Report, StageResult


def _report() -> Report:
    stages = [
        StageResult("matmul", "t", status=PASS, summary="12 cases", duration_s=1.5, numbers={"worst": 0.1}),
        StageResult("model", "t", status=FAIL, failures=["loss NaN", "grads off"], error="Trace", notes=["seeded"]),
        StageResult("dtype", "t", status=SKIP, reason="skipped: stage matmul failed"),
        StageResult("compile", "t", status=FAIL, failures=["compile: timed out"], hung=True),
    ]
    return Report(SCHEMA, "2025-01-01T00:00:00+00:00", {"hostname": "box"}, {}, {"backend": "cpu"}, {}, stages, 2.5, 1)


def test_print_stage_lists_extra_failures_and_notes_under_the_line() -> None:
    out = io.StringIO()
    report = _report()
    for stage in report.stages[:3]:
        output.print_stage(stage, out)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["PASS", "matmul", "1.50s", "12", "cases"]
    assert lines[1].split()[:2] == ["FAIL", "model"] and lines[1].endswith("loss NaN (+1 more)")
    assert lines[2].strip() == "- grads off" and lines[3].strip() == "- seeded"
    assert lines[4].split() == ["SKIP", "dtype", *report.stages[2].reason.split()]  # no duration for a skip
    assert len(lines) == 5


def test_header_and_footer() -> None:
    out = io.StringIO()
    output.print_header("auto", "cpu", "2.13.0", out)
    report = _report()
    output.print_footer(report, out)
    text = out.getvalue()
    assert "device cpu (requested auto), torch 2.13.0" in text
    assert "1 passed, 2 failed, 1 skipped in 2.5s -> exit 1" in text
    assert "not present" not in text
    report.stages[1].device_missing = True
    out = io.StringIO()
    output.print_footer(report, out)
    assert out.getvalue().splitlines()[-1].endswith(report.stages[1].message())


def test_write_json_round_trips_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text("stale")
    report = _report()
    output.write_json(report, path)
    data = json.loads(path.read_text())
    assert data == json.loads(json.dumps(report.to_dict()))
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_write_junit_marks_failures_skips_and_hangs(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    report = _report()
    output.write_junit(report, path)
    suite = ET.parse(path).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "2", "1")
    assert suite.get("hostname") == "box"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert list(cases) == [s.name for s in report.stages]
    assert cases["matmul"].find("failure") is None and cases["matmul"].find("skipped") is None
    assert json.loads(cases["matmul"].findtext("system-out") or "")["numbers"] == {"worst": 0.1}
    failure = cases["model"].find("failure")
    assert failure is not None and failure.get("message") == "loss NaN (+1 more)"
    assert failure.text == "loss NaN\ngrads off\nTrace"
    skipped = cases["dtype"].find("skipped")
    assert skipped is not None and skipped.get("message") == report.stages[2].reason
    assert cases["compile"].get("hung") == "true" and cases["model"].get("hung") is None
    assert cases["model"].get("classname") == "neuron_smoke.cpu"
    assert [p.name for p in tmp_path.iterdir()] == ["junit.xml"]
