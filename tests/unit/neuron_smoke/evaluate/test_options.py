"""neuron_smoke.evaluate.options: the evaluation's arguments and the hand-over to run.evaluate (usage errors first)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from neuron_smoke import EXIT_USAGE
from neuron_smoke.context import Options
from neuron_smoke.errors import UsageError
from neuron_smoke.evaluate import options, run
from neuron_smoke.evaluate.shapes import SWEEP_STEPS
from neuron_smoke.evaluate.tensors import DEFAULT_FULL_LIMIT

MLP = "neuron_smoke.examples.mlp:factory"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="verify-device")
    p.add_argument("--report", type=Path)  # cli.py's own option, which run_evaluation reads too
    options.add_arguments(p)
    return p


def test_the_arguments_parse_and_request_the_evaluation(tmp_path: Path) -> None:
    args = _parser().parse_args(["--record", str(tmp_path / "b"), "--full-tensor-limit", "64"])
    assert args.record == tmp_path / "b" and args.full_tensor_limit == 64 and args.baseline is None
    assert options.evaluation_requested(args)
    assert options.evaluation_requested(_parser().parse_args(["--shapes", "1x8"]))
    assert not options.evaluation_requested(_parser().parse_args(["--eval-report", str(tmp_path)]))


@pytest.mark.parametrize("option", ["--full-tensor-limit", "--sweep-steps"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_a_tensor_limit_or_sweep_steps_below_one_is_refused(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args([option, value])
    assert exc.value.code == EXIT_USAGE
    assert f"{option}: must be > 0: {value}" in capsys.readouterr().err


def _capture_evaluate(monkeypatch: pytest.MonkeyPatch) -> list[tuple[run.EvalOptions, Any]]:
    calls: list[tuple[run.EvalOptions, Any]] = []

    def fake(opts: run.EvalOptions, spec: Any) -> int:
        calls.append((opts, spec))
        return 7

    monkeypatch.setattr(run, "evaluate", fake)
    return calls


def test_the_options_reach_evaluate_with_the_defaults_filled_in(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = _capture_evaluate(monkeypatch)
    args = _parser().parse_args(["--baseline", str(tmp_path), "--shapes", "2x32,4x32", "--report", "r.json"])
    assert options.run_evaluation(Options(device="cpu", model=MLP, iterations=4, warmup=1), args) == 7
    [(opts, spec)] = calls
    assert (opts.device, opts.baseline, opts.record, opts.report) == ("cpu", tmp_path, None, Path("r.json"))
    assert opts.shapes == [(2, 32), (4, 32)] and (opts.iterations, opts.warmup) == (4, 1)
    assert (
        opts.rtol is None and opts.precision is None
    )  # evaluate() takes the precision's bound and the release's default
    assert opts.full_tensor_limit == DEFAULT_FULL_LIMIT and opts.sweep_steps == SWEEP_STEPS == 20
    assert spec.name == MLP
    args = _parser().parse_args(["--record", str(tmp_path), "--full-tensor-limit", "9", "--sweep-steps", "3"])
    options.run_evaluation(Options(device="cpu", model=MLP, model_rtol=0.25, compile_backend="eager"), args)
    assert (calls[1][0].rtol, calls[1][0].full_tensor_limit, calls[1][0].compile_backend) == (0.25, 9, "eager")
    assert calls[1][0].sweep_steps == 3
    assert calls[1][0].shapes is None


# --record with --baseline, and an evaluation without --model, are refused before torch is imported
# (neuron_smoke.validate.check_evaluation: tests/unit/neuron_smoke/test_validate.py); what is left here is refused by
# the evaluation itself.
@pytest.mark.parametrize(
    ("argv", "model", "message"),
    [
        (["--shapes", "8xq"], MLP, "--shapes: '8xq' is not a shape"),
        (
            ["--record", "a"],
            "neuron_smoke.examples.mlp:nothing_here",
            "neuron_smoke.examples.mlp has no callable 'nothing_here'",
        ),
    ],
)
def test_usage_errors_exit_2_with_the_message_and_evaluate_nothing(
    argv: list[str],
    model: str | None,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls = _capture_evaluate(monkeypatch)
    assert options.run_evaluation(Options(device="cpu", model=model), _parser().parse_args(argv)) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("verify-device: error: ") and message in err
    assert calls == []


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_bound_that_is_not_a_finite_positive_number_is_refused(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from neuron_smoke import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(["--device", "cpu", "--model", MLP, "--record", "b", "--model-rtol", value])
    assert exc.value.code == EXIT_USAGE
    assert f"--model-rtol: must be a finite number > 0: {value}" in capsys.readouterr().err


@pytest.mark.parametrize(("option", "kind"), [("--iterations", "int"), ("--model-rtol", "float")])
def test_a_number_that_does_not_parse_is_named_with_its_kind(
    option: str, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from neuron_smoke import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(["--device", "cpu", "--model", MLP, "--record", "b", option, "x"])
    assert exc.value.code == EXIT_USAGE
    assert f"argument {option}: invalid {kind} value: 'x'" in capsys.readouterr().err


def test_a_negative_warmup_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from neuron_smoke import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(["--device", "cpu", "--model", MLP, "--record", "b", "--warmup", "-1"])
    assert exc.value.code == EXIT_USAGE
    assert "argument --warmup: must be 0 or more: -1" in capsys.readouterr().err


def test_shapes_the_model_cannot_take_are_refused_before_any_step(monkeypatch: pytest.MonkeyPatch) -> None:
    from neuron_smoke import models
    from neuron_smoke.evaluate import capture, run

    monkeypatch.setattr(capture, "time_steps", lambda *a, **k: pytest.fail("a step ran"))
    opts = run.EvalOptions(device="cpu", shapes=[(4, 32), (4, 32, 7)])
    with pytest.raises(UsageError, match="--shapes: 4x32x7 has 3 dimensions, the model's first input 16x32 has 2"):
        run.evaluate(opts, models.load(MLP))


@pytest.mark.parametrize("value", ["0", "-2", "1.5", "three", "10001"])
def test_steps_that_are_not_a_whole_number_from_1_are_refused(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args([f"--steps={value}"])
    assert exc.value.code == EXIT_USAGE
    assert f"--steps: must be a whole number of steps from 1 to 10000: {value}" in capsys.readouterr().err


def test_steps_request_the_evaluation_and_reach_evaluate(monkeypatch: pytest.MonkeyPatch) -> None:
    args = _parser().parse_args(["--steps", "4"])
    assert args.steps == 4 and options.evaluation_requested(args)
    calls = _capture_evaluate(monkeypatch)
    options.run_evaluation(Options(device="cpu", model=MLP), args)
    assert calls[0][0].steps == 4
