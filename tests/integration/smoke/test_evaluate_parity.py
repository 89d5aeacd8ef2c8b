"""verify-device --steps N end to end: the loss curve recorded on the CPU, compared on the CPU and on the simulated
neuron device; a healthy model's curve matches and an optimizer step that goes wrong is found at the step after it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.integration.smoke.conftest import make_base_env, verify
from tests.integration.smoke.forkserver import ForkServer
from tests.integration.smoke.test_evaluate import FAST, FP32, TIMEOUT, _env, compare, record

MODEL = "parity_faults:factory"  # the MLP with its own optimizer (parity_faults.py beside this file)
STEPS = 5
WRONG_STEP = 2  # the optimizer's second update is wrong: the losses of steps 1 and 2 match, step 3's does not


@pytest.fixture(scope="module")
def curve_baseline(tmp_path_factory: pytest.TempPathFactory, forkserver: ForkServer) -> Path:
    tmp = tmp_path_factory.mktemp("parity")
    return record(make_base_env(tmp), tmp, MODEL, forkserver, "--steps", str(STEPS), *FP32)


def _parity(tmp: Path) -> dict[str, object]:
    parity: dict[str, object] = json.loads((tmp / "compare" / "report.json").read_text())["parity"]
    return parity


def test_the_baseline_keeps_the_curve_of_the_factorys_optimizer(curve_baseline: Path) -> None:
    kept = json.loads((curve_baseline / "index.json").read_text())["parity"]
    assert (kept["steps"], kept["optimizer"], kept["precision"]) == (STEPS, "FaultySGD(lr=0.05; the factory's)", "fp32")
    assert len(kept["loss"]) == STEPS and kept["loss"][-1] < kept["loss"][0]


def test_a_wrong_optimizer_step_on_the_cpu_is_found_at_the_step_after_it(
    base_env: dict[str, str], curve_baseline: Path, tmp_path: Path, forkserver: ForkServer
) -> None:
    env = _env(base_env, NEURON_PARITY_FAULT_STEP=str(WRONG_STEP), NEURON_PARITY_FAULT_DEVICE="cpu")
    run = verify(env, "--device", "cpu", "--model", MODEL, "--baseline", str(curve_baseline), "--eval-report",
                 str(tmp_path / "compare"), *FAST, *FP32, tmp=tmp_path, timeout=TIMEOUT, forked=forkserver)  # fmt: skip
    assert run.returncode == 1, run.output
    parity = _parity(tmp_path)
    assert (parity["diverged_at"], parity["source"]) == (WRONG_STEP + 1, "environment")  # the device is this CPU
    assert f"the loss leaves the baseline's curve at step {WRONG_STEP + 1} of {STEPS}" in run.output


def test_a_healthy_curve_matches_on_the_device_and_a_wrong_step_there_is_the_devices(
    sim_env: dict[str, str], curve_baseline: Path, tmp_path: Path, forkserver: ForkServer
) -> None:
    healthy = compare(_env(sim_env), tmp_path, curve_baseline, MODEL, forkserver, *FP32)  # --steps: the baseline's
    assert healthy.returncode == 0, healthy.output
    parity = _parity(tmp_path)
    loss = parity["loss"]
    assert isinstance(loss, dict) and loss["device"] == loss["baseline"] == loss["cpu"]  # bit for bit, every step
    assert len(loss["device"]) == STEPS and parity["diverged_at"] is None
    assert f"loss over {STEPS} steps (FaultySGD(lr=0.05; the factory's)): " in healthy.output
    assert "![Loss over 5 steps](report-loss.png)" in (tmp_path / "compare" / "report.md").read_text()
    assert (tmp_path / "compare" / "report-loss.png").read_bytes().startswith(b"\x89PNG")
    env = _env(sim_env, NEURON_PARITY_FAULT_STEP=str(WRONG_STEP))
    wrong = compare(env, tmp_path, curve_baseline, MODEL, forkserver, *FP32, "--steps", str(STEPS))
    assert wrong.returncode == 1, wrong.output
    parity = _parity(tmp_path)
    assert (parity["diverged_at"], parity["source"]) == (WRONG_STEP + 1, "device")
    rows = parity["rows"]
    assert isinstance(rows, list) and [r["ok"] for r in rows] == [True, True, False, False, False]
    assert f"the loss leaves the CPU run's curve at step {WRONG_STEP + 1} of {STEPS}" in wrong.output
    assert "numerics 1;" in wrong.output  # the tensors of the single step (step 1) still agree


def test_a_healthy_curve_matches_on_a_device_that_auto_casts_at_the_default_precision(
    sim_env: dict[str, str], curve_baseline: Path, tmp_path: Path, forkserver: ForkServer
) -> None:
    env = _env(sim_env, NEURON_SIM_INJECT="fp32_as_bf16")  # matmuls at bfloat16 inputs, as neuronx-cc's default
    run = compare(env, tmp_path, curve_baseline, MODEL, forkserver)  # bf16-matmul: the CPU run rounds alike
    assert run.returncode == 0, run.output
    assert "precision bf16-matmul" in run.output
    parity = _parity(tmp_path)
    loss, rows = parity["loss"], parity["rows"]
    assert isinstance(loss, dict) and isinstance(rows, list) and parity["diverged_at"] is None
    assert loss["device"] == loss["cpu"] != loss["baseline"]  # the float32 baseline's curve, within the bound
    assert 0 < max(r["vs_baseline"] for r in rows) <= parity["rtol"]


def test_a_baseline_of_other_steps_or_without_a_curve_is_refused_before_any_work(
    base_env: dict[str, str], curve_baseline: Path, tmp_path: Path, forkserver: ForkServer
) -> None:
    run = verify(_env(base_env), "--device", "cpu", "--model", MODEL, "--baseline", str(curve_baseline),
                 "--steps", "3", "--eval-report", str(tmp_path / "r"), tmp=tmp_path, timeout=TIMEOUT,
                 forked=forkserver)  # fmt: skip
    assert run.returncode == 2, run.output
    assert f"--steps 3: the baseline {curve_baseline} was recorded with --steps {STEPS}" in run.output
    assert "neuron-eval:" not in run.output and not (tmp_path / "r").exists()
    curveless = tmp_path / "curveless"
    shutil.copytree(curve_baseline, curveless)
    index = json.loads((curveless / "index.json").read_text())
    (curveless / "index.json").write_text(json.dumps({k: v for k, v in index.items() if k != "parity"}))
    run = verify(_env(base_env), "--device", "cpu", "--model", MODEL, "--baseline", str(curveless), "--steps",
                 str(STEPS), tmp=tmp_path, timeout=TIMEOUT, forked=forkserver)  # fmt: skip
    assert run.returncode == 2, run.output
    assert f"the baseline {curveless} has no loss curve (it was recorded without --steps)" in run.output
    assert "neuron-eval:" not in run.output
