"""neuron_smoke.evaluate.verdict: one banner with the counts per kind; --fail-on chooses what is "not ready"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from neuron_smoke.evaluate import run, verdict
from neuron_smoke.examples import mlp
from neuron_smoke.models import ModelSpec


def _data(**readiness: Any) -> dict[str, Any]:
    r = {"findings": 0, "fallback": [], "compile_failure": None, "unsupported": []} | readiness
    return {"tensors": [{"tensor": "t", "ok": True, "vs_cpu": 0.0, "source": "-", "layer": "fc"}], "readiness": r}


def test_clean_findings_and_failures_give_the_three_answers() -> None:
    assert verdict.judge(_data(), ("numerics",))["banner"] == (
        "verdict: ready (readiness 0, fallback 0, compile 0, numerics 0; --fail-on numerics)"
    )
    fell = _data(findings=2, fallback=[{"op": "aten::gelu", "module": "act1", "calls": 1}])
    assert verdict.judge(fell, ("numerics",))["answer"] == "ready with findings"
    assert verdict.judge(fell, ("numerics", "fallback"))["answer"] == "not ready"
    assert verdict.judge(fell, ("numerics",))["counts"] == {"readiness": 1, "fallback": 1, "compile": 0, "numerics": 0}
    failed = _data() | {"failure": {"phase": "forward", "error": "E", "module": "odd", "where": "m.py:3"}}
    judged = verdict.judge(failed, ("compile",))
    assert judged["answer"] == "not ready" and "the step failed" in judged["banner"]
    assert verdict.top_findings(failed) == ["step failed (forward): E [module odd, m.py:3]"]


def test_fail_on_names_known_kinds_only() -> None:
    assert verdict.parse_fail_on("fallback, numerics,fallback") == ("fallback", "numerics")
    with pytest.raises(
        ValueError, match=r"unknown kind\(s\) speed; choose from readiness, fallback, compile, numerics"
    ):
        verdict.parse_fail_on("speed")


def test_the_banner_is_on_the_console_and_at_the_top_of_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, args, loss_fn = mlp.factory()
    spec = ModelSpec(model, tuple(args), {}, loss_fn, "mlp")
    assert run.evaluate(run.EvalOptions(device="cpu", record=tmp_path / "b", iterations=1, warmup=0), spec) == 0
    banner = "verdict: ready (readiness 0, fallback 0, compile 0, numerics 0; --fail-on numerics)"
    assert capsys.readouterr().out.splitlines()[-2] == banner  # then the report line
    assert json.loads((tmp_path / "b" / "report.json").read_text())["verdict"]["banner"] == banner
    markdown = (tmp_path / "b" / "report.md").read_text().splitlines()
    assert markdown[4] == f"**{banner}**"  # the title, the Summary heading, then the verdict


def test_a_loss_curve_that_leaves_the_baselines_counts_as_numerics_and_is_a_top_finding() -> None:
    finding = "the loss leaves the baseline's curve at step 3 of 5: 1.3 vs 1.2 (...)"
    data = _data() | {"parity": {"diverged_at": 3, "finding": finding}}
    judged = verdict.judge(data, ("numerics",))
    assert judged["answer"] == "not ready" and judged["counts"]["numerics"] == 1
    assert verdict.top_findings(data) == [finding]
    agreeing = _data() | {"parity": {"diverged_at": None, "finding": None}}
    assert verdict.judge(agreeing, ("numerics",))["answer"] == "ready" and verdict.top_findings(agreeing) == []
