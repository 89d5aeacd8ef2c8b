"""neuron_smoke.evaluate.report: the JSON report (non-finite numbers as strings), its Markdown and HTML renderings,
and the files written together."""

from __future__ import annotations

import base64
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from neuron_smoke.evaluate import plots, report
from neuron_smoke.evaluate.sections import Section, build_sections
from tests.unit.neuron_smoke.evaluate._readiness import nothing_found


def test_the_json_is_compact_and_spells_non_finite_numbers(tmp_path: Path) -> None:
    data = {"a": math.inf, "b": [-math.inf, {"c": math.nan}], "d": (1.5, "x"), "e": None}
    report.write_json(data, tmp_path / "deep" / "r.json")
    text = (tmp_path / "deep" / "r.json").read_text()
    assert text.endswith("\n") and "\n" not in text[:-1] and ": " not in text
    assert json.loads(text) == {"a": "inf", "b": ["-inf", {"c": "nan"}], "d": [1.5, "x"], "e": None}
    assert [p.name for p in (tmp_path / "deep").iterdir()] == ["r.json"]  # no temporary file left


@pytest.mark.parametrize(("value", "text"), [(None, "-"), (0.000123456, "0.000123"), (12345.6, "1.23e+04"), (3, "3")])
def test_a_cell_shows_floats_to_three_digits_and_nothing_as_a_dash(value: Any, text: str) -> None:
    assert report.cell(value) == text


def _sections() -> list[Section]:
    table = Section("Per tensor", ["worst first"], ["tensor", "error", "ok"], [["a|b", 0.5, "FAIL"], ["c", None, "ok"]])
    plot = Section("Per layer <all>", image=("report-layers.png", b"\x89PNG fake"))
    return [Section("Summary", ["Mode scan & more."]), table, plot]


def test_markdown_has_the_title_text_image_links_and_escaped_tables() -> None:
    text = report.to_markdown(_sections(), "Model evaluation: m on cpu")
    lines = text.splitlines()
    assert lines[0] == "# Model evaluation: m on cpu"
    assert "## Summary" in lines and "Mode scan & more." in lines
    assert "| tensor | error | ok |" in lines and "|---|---|---|" in lines
    assert "| a\\|b | 0.5 | FAIL |" in lines and "| c | - | ok |" in lines
    assert "![Per layer <all>](report-layers.png)" in lines


def test_html_escapes_text_marks_failures_and_embeds_the_images() -> None:
    page = report.to_html(_sections(), "m <on> cpu")
    assert page.startswith("<!doctype html>") and page.endswith("</body></html>\n")
    assert "<title>m &lt;on&gt; cpu</title>" in page and "<h2>Per layer &lt;all&gt;</h2>" in page
    assert "<p>Mode scan &amp; more.</p>" in page
    assert "<td class='bad'>FAIL</td>" in page and "<td>ok</td>" in page and "<td>a|b</td>" in page
    [b64] = re.findall(r"src='data:image/png;base64,([^']+)'", page)
    assert base64.b64decode(b64) == b"\x89PNG fake"


def _data() -> dict[str, Any]:
    return {
        "mode": "compare",
        "model": {"name": "mlp", "class": "m.MLP", "parameters": 10},
        "device": {"backend": "cpu", "compile_backend": "aot_eager"},
        "versions": {"torch": "2.13.0"},
        "rtol": 1e-3,
        "timing": {"first_call_s": 0.5, "p50_ms": 1.0, "p95_ms": 2.0, "iterations": 10},
        "readiness": nothing_found(),
        "inventory": [{"op": "aten::addmm.default", "module": "fc", "calls": 1, "dtypes": ["float32"]}],
        "tensors": [
            {
                "tensor": "loss",
                "shape": [],
                "vs_cpu": math.inf,
                "vs_baseline": None,
                "cpu_vs_baseline": None,
                "source": "device",
                "ok": False,
                "layer": None,
            }
        ],
        "origins": {"baseline": [], "cpu": []},
        "layers": [{"layer": "fc", "tensors": 1, "worst_vs_cpu": 0.1}],
    }


def test_write_all_writes_the_json_markdown_html_and_each_plot(tmp_path: Path) -> None:
    out = tmp_path / "out"
    written = report.write_all(_data(), out)
    pngs = [s.image[0] for s in build_sections(_data()) if s.image is not None]
    assert written == [out / "report.json", out / "report.md", out / "report.html", *(out / p for p in pngs)]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in written)
    assert json.loads((out / "report.json").read_text())["tensors"][0]["vs_cpu"] == "inf"
    md = (out / "report.md").read_text()
    assert md.startswith("# Model evaluation: mlp on cpu\n") and "| loss | scalar | - | inf | - | device | FAIL |" in md
    page = (out / "report.html").read_text()
    assert "<td class='bad'>inf</td>" in page
    if plots.available():
        assert pngs == ["report-layers.png"] and "![Per layer](report-layers.png)" in md
        assert (out / "report-layers.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_reports_are_written_with_the_users_umask(tmp_path: Path, mask: int) -> None:
    old = os.umask(mask)
    try:
        report.write_json({"a": 1}, tmp_path / "r.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o666 & ~mask
