"""verify-device end to end: the CPU device, the simulated neuron device, and every injected fault."""

from __future__ import annotations

import glob
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from neuron_smoke import registry
from neuron_smoke.stage_fabric import SINGLE_HOST
from tests.integration.smoke.conftest import SIM_CELL, Run, Verify, verify

STAGES = list(registry.NAMES)  # the run order is the registry's
# The cluster stages (their titles say so in the registry): on one host each skips, saying why.
CLUSTER = [entry.name for entry in registry.TABLE if entry.title.startswith("cluster:")]
SINGLE_HOST_SKIPS = dict.fromkeys(CLUSTER, "skip")


def _single_host_skips(run: Run) -> None:
    assert CLUSTER and all(run.stage(name)["reason"] == SINGLE_HOST for name in CLUSTER), run.output


# The fault tests concern the single-process stages; the collectives have their own tests (test_launchers.py).
NO_COLLECTIVES = "--stages=environment,device,matmul,model,fallback,compile,dtype,throughput"
SMALL = "--throughput-size=256"


def test_cpu_run_passes_and_reports_every_stage(base_env: dict[str, str], tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    run = verify(base_env, "--device", "cpu", "--junit", str(junit), tmp=tmp_path)
    assert run.returncode == 0
    assert [s["name"] for s in run.report["stages"]] == STAGES
    statuses = {s["name"]: s["status"] for s in run.report["stages"]}
    assert statuses == {**dict.fromkeys(STAGES, "pass"), "fallback": "skip", **SINGLE_HOST_SKIPS}
    _single_host_skips(run)
    assert "no CPU-fallback op tracking" in run.stage("fallback")["reason"]
    assert run.stage("environment")["notes"][0].startswith("pins not checked")
    assert run.stage("collectives")["numbers"]["expected_sum"] == 3
    assert run.report["exit_code"] == 0
    cases = ET.parse(junit).getroot().findall("testcase")
    assert [c.get("name") for c in cases] == STAGES
    assert cases[STAGES.index("fallback")].find("skipped") is not None


def _assert_environment_and_cores(run: Run) -> None:
    env = run.stage("environment")["numbers"]
    assert env["cell"]["id"] == SIM_CELL["id"] and env["pin_mismatches"] == []
    assert env["pins_checked"] == 4  # four named pins; the locked torch and nki are the same pins, checked once
    assert run.stage("device")["numbers"]["accelerator"] == "neuron"
    device = run.stage("device")["numbers"]
    # Two nodes hold 8 NeuronCores; the ranks own cores 0 and 1, this process core 2 (cores belong to one process).
    assert device["device_count"] == 1 and device["visible_cores"] == 8
    assert device["neuron_ls_devices"] == 2  # the simulated neuron-ls lists the nodes it sees
    assert device["cores"] == {"available": 8, "process": "2", "ranks": "0-1", "user_restricted": False}
    assert run.report["device"]["backend"] == "neuron"


def _assert_collectives(run: Run, launcher: str) -> None:
    collectives = run.stage("collectives")["numbers"]
    assert [r["value"] for r in collectives["results"]] == [3.0, 3.0]
    assert collectives["rank_cores"] == [0, 1] and collectives["launcher"] == launcher
    assert collectives["command"].endswith("--cores 0,1)" if launcher == "fork" else "--cores 0,1")


def test_sim_neuron_passes_every_stage(clean_sim_run: Run) -> None:
    # Every runtime rule of the simulated device is on (tests/simdevice/README.md); the fork launcher (the default).
    run = clean_sim_run
    assert run.returncode == 0, run.output
    assert [s["name"] for s in run.report["stages"]] == STAGES
    assert {s["name"]: s["status"] for s in run.report["stages"]} == {
        **dict.fromkeys(STAGES, "pass"),
        **SINGLE_HOST_SKIPS,
    }
    _single_host_skips(run)
    _assert_environment_and_cores(run)
    fallback = run.stage("fallback")["numbers"]
    assert fallback["fallback_ops"] == {} and fallback["executed_op_calls"] > 0
    compiled = run.stage("compile")["numbers"]
    assert compiled["backend"] == "neuron"
    # Two fresh processes share an empty compile cache: the first compiles (stores), the second only loads.
    assert compiled["cold_graphs_compiled"] > 0 and compiled["warm_cache_hit"] is True
    assert compiled["warm_graphs_compiled"] == 0 and compiled["warm_graphs_loaded"] == compiled["cold_graphs_compiled"]
    # This process: stage 4's step, forward and backward graphs, compiled into the run's own empty cache.
    assert compiled["graphs_compiled"] == 2 and compiled["graphs_loaded"] == 0
    assert "cache hit" in run.stage("compile")["summary"]
    _assert_collectives(run, "fork")


def test_sim_neuron_collectives_pass_under_torchrun(
    sim_env: dict[str, str], cell_file: Path, tmp_path: Path, fverify: Verify
) -> None:
    # The launcher changes only how the collectives stage starts its ranks (and the core split is made before either
    # starts): the stages it touches run here, every other stage of a clean run in test_sim_neuron_passes_every_stage.
    args = ("--cell-file", str(cell_file), "--stages=environment,device,collectives", "--expected-devices", "8")
    run = fverify(sim_env, *args, "--launcher", "torchrun", tmp=tmp_path, timeout=360)
    assert run.returncode == 0, run.output
    statuses = {s["name"]: s["status"] for s in run.report["stages"]}
    assert {n for n, status in statuses.items() if status == "pass"} == {"environment", "device", "collectives"}
    _assert_environment_and_cores(run)
    _assert_collectives(run, "torchrun")


def test_wrong_matmul_fails_matmul_and_model(sim_env: dict[str, str], tmp_path: Path, fverify: Verify) -> None:
    env = {**sim_env, "NEURON_SIM_FAULT": "wrong_matmul"}
    run = fverify(env, NO_COLLECTIVES, SMALL, tmp=tmp_path)
    assert run.returncode == 1
    assert run.stage("matmul")["status"] == "fail"
    assert "the tolerance bound" in run.stage("matmul")["failures"][0]
    assert run.stage("model")["status"] == "fail"
    assert run.stage("throughput")["reason"] == "skipped: stage matmul failed"
    assert "FAIL  matmul" in run.output


def test_fallback_ops_fail_unless_allowed(sim_env: dict[str, str], tmp_path: Path, fverify: Verify) -> None:
    env = {**sim_env, "NEURON_SIM_FAULT": "fallback"}
    stages = "--stages=environment,device,matmul,model,fallback"
    run = fverify(env, stages, tmp=tmp_path)
    assert run.returncode == 1
    fallback = run.stage("fallback")
    assert fallback["status"] == "fail"
    assert fallback["numbers"]["disallowed"] == ["aten::addmm", "aten::gelu"]
    assert "--allow-fallback" in fallback["failures"][0]

    allowed = fverify(env, stages, "--allow-fallback", "addmm,aten::gelu.default", tmp=tmp_path)
    assert allowed.returncode == 0, allowed.output
    assert set(allowed.stage("fallback")["numbers"]["fallback_ops"]) == {"aten::addmm", "aten::gelu"}


def test_hang_times_out_naming_the_stage(sim_env: dict[str, str], tmp_path: Path, fverify: Verify) -> None:
    env = {**sim_env, "NEURON_SIM_FAULT": "hang"}
    # Every stage gets the timeout: 10 s leaves the environment stage (pip check, cold imports) room when loaded.
    run = fverify(env, NO_COLLECTIVES, "--timeout", "10", tmp=tmp_path)
    assert run.returncode == 1
    assert run.stage("matmul")["failures"] == ["matmul: timed out after 10s (a device call did not return)"]
    assert run.stage("model")["reason"] == "skipped: stage matmul timed out, the device may be wedged"
    assert run.elapsed_s < 60


def test_no_device_exits_3(sim_env: dict[str, str], tmp_path: Path, fverify: Verify) -> None:
    run = fverify({**sim_env, "NEURON_SIM_FAULT": "no_device"}, tmp=tmp_path)
    assert run.returncode == 3
    assert run.stage("device")["status"] == "fail"
    assert "torch reports 0 devices" in run.output
    assert run.stage("matmul")["reason"] == "skipped: stage device failed"


def test_missing_device_files_exit_3_with_help(sim_env: dict[str, str], tmp_path: Path, fverify: Verify) -> None:
    env = {**sim_env, "NEURON_SMOKE_DEV_GLOB": str(tmp_path / "nothing" / "neuron*")}
    run = fverify(env, tmp=tmp_path)
    assert run.returncode == 3
    for hint in ("neuron-ls", "--device=/dev/neuron0", "driver", "host"):
        assert hint in run.output
    assert "the requested device is not present" in run.output


@pytest.mark.skipif(bool(glob.glob("/dev/neuron*")), reason="this host has Neuron devices")
def test_default_run_without_neuron_exits_3_quickly(base_env: dict[str, str], tmp_path: Path, fverify: Verify) -> None:
    env = {k: v for k, v in base_env.items() if k != "NEURON_SMOKE_DEV_GLOB"}
    run = fverify(env, tmp=tmp_path, timeout=60)
    assert run.returncode == 3
    assert run.elapsed_s < 30
    assert "/dev/neuron* not found" in run.output


def test_version_drift_fails_environment(sim_env: dict[str, str], tmp_path: Path, fverify: Verify) -> None:
    drifted = tmp_path / "drifted.json"
    drifted.write_text(json.dumps({**SIM_CELL, "nki": "0.8.0", "torch_neuronx": "2.14.3.0.*"}))
    run = fverify({**sim_env, "NEURON_TORCH_CELL_FILE": str(drifted)}, NO_COLLECTIVES, SMALL, tmp=tmp_path)
    assert run.returncode == 1
    env = run.stage("environment")
    assert env["status"] == "fail"
    assert env["numbers"]["pin_mismatches"] == [
        "torch-neuronx 2.13.3.0.0+sim does not satisfy the pin torch-neuronx==2.14.3.0.*",
        "nki 0.7.0 does not satisfy the pin nki==0.8.0",
    ]
    assert run.stage("matmul")["reason"] == "skipped: stage environment failed"


def test_cpu_tolerates_absent_neuron_packages_but_not_drift(
    base_env: dict[str, str], tmp_path: Path, fverify: Verify
) -> None:
    cell = tmp_path / "cell.json"
    cell.write_text(json.dumps(SIM_CELL))
    run = fverify(base_env, "--device", "cpu", "--cell-file", str(cell), "--stages", "environment", tmp=tmp_path)
    assert run.returncode == 0, run.output
    assert run.stage("environment")["numbers"]["pinned_not_installed"] == ["torch-neuronx", "neuronx-cc", "nki"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "tpu"], "invalid choice"),
        (["--cell", "2.14-py3.12-ubuntu24.04"], "pass --cell-file"),
        (["--model", "no_such_module:factory"], "cannot import no_such_module"),
        (["--model", "nocolon"], "expected package.module:factory"),
        (["--stages", "matmul,warp"], "unknown stage(s) warp"),
        (["--timeout", "0"], "must be a number of seconds over 0 and at most"),
    ],
)
def test_usage_errors_exit_2(
    base_env: dict[str, str], tmp_path: Path, args: list[str], message: str, fverify: Verify
) -> None:
    run = fverify(base_env, "--device", "cpu", *args, tmp=tmp_path)
    assert run.returncode == 2
    assert message in run.output


def test_a_python_without_torch_fails_environment_and_still_reports(base_env: dict[str, str], tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    env = {**base_env, "NEURON_TORCH_PYTHON": str(tmp_path / "venv" / "bin" / "python")}
    junit = tmp_path / "junit.xml"
    run = verify(env, "--device", "cpu", "--junit", str(junit), tmp=tmp_path)
    assert run.returncode == 1
    assert "Traceback" not in run.output
    environment = run.stage("environment")
    assert environment["status"] == "fail"
    assert "cannot import torch" in environment["failures"][0] and "NEURON_TORCH_PYTHON=" in environment["failures"][0]
    assert [s["name"] for s in run.report["stages"]] == STAGES
    assert {s["reason"] for s in run.report["stages"][1:]} == {"skipped: torch is not importable"}
    assert run.report["versions"]["torch"] == "not importable" and run.report["exit_code"] == 1
    assert ET.parse(junit).getroot().get("failures") == "1"
    # Usage errors are still usage errors without torch.
    assert verify(env, "--stages", "warp", tmp=tmp_path).returncode == 2


def test_a_torch_that_imports_but_is_broken_still_runs_what_it_can_and_reports(
    base_env: dict[str, str], tmp_path: Path
) -> None:
    # A torch whose package imports but holds nothing else (no torch.nn, torch.distributed or dtypes: a broken
    # install, or the test hosts' fixture torch): the selected stages that need none of it run, the others fail
    # naming what is missing, and the report is written. No stage module may be imported before its stage runs.
    # It is installed, package and dist-info side by side, as pip leaves one: a torch folder alone ahead of the
    # venv's would be a second torch, which the environment stage fails (test_stage_environment.py).
    broken = tmp_path / "broken-torch" / "torch"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('__version__ = "2.13.0+cpu"\n')
    dist_info = broken.parent / "torch-2.13.0+cpu.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0+cpu\n")
    env = {**base_env, "PYTHONPATH": str(broken.parent)}
    only = verify(env, "--device", "cpu", "--stages", "environment", tmp=tmp_path)
    assert only.returncode == 0 and "Traceback" not in only.output, only.output
    assert only.stage("environment")["status"] == "pass"
    assert "torch 2.13.0+cpu" in only.output
    whole = verify(env, "--device", "cpu", tmp=tmp_path)
    assert whole.returncode == 1 and "Traceback" not in whole.output, whole.output
    assert [s["name"] for s in whole.report["stages"]] == STAGES
    assert whole.stage("environment")["status"] == "pass"
    device = whole.stage("device")
    assert device["status"] == "fail" and "torch" in device["failures"][0], device
    assert {s["status"] for s in whole.report["stages"][2:]} == {"skip"}


def test_bring_your_own_model(sim_env: dict[str, str], tmp_path: Path, fverify: Verify) -> None:
    (tmp_path / "mymodels.py").write_text(
        "import torch\n"
        "def factory():\n"
        "    torch.manual_seed(3)\n"
        "    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))\n"
        "    return model, torch.randn(5, 8)\n"
    )
    env = {**sim_env, "PYTHONPATH": f"{sim_env['PYTHONPATH']}:{tmp_path}"}
    # The model stage: a user's model through the fallback and compile stages (its fresh processes load --model too)
    # is test_faults.py's dict test.
    run = fverify(env, "--model", "mymodels:factory", "--stages", "environment,device,matmul,model", tmp=tmp_path)
    assert run.returncode == 0, run.output
    model = run.stage("model")["numbers"]
    assert model["model"] == "mymodels:factory"
    # output, loss, 4 gradients and 4 updated weights, in each run: float32 eager and float32 compiled
    assert set(model["runs"]) == {"float32", "float32 compiled (neuron)"}
    assert all(r["compared"] == 10 and r["ok"] for r in model["runs"].values())


def test_pytest_entry_runs_the_stages(base_env: dict[str, str], tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.integration.smoke.conftest import REPO

    env = {
        **base_env,
        "NEURON_SMOKE_DEVICE": "cpu",
        "NEURON_SMOKE_ARGS": "--stages environment,device,matmul,model,fallback",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(REPO / "smoke_tests" / "device")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0
    assert f"4 passed, {len(STAGES) - 4} skipped" in proc.stdout  # the five selected, fallback skipped on the CPU
    assert "fallback: cpu has no CPU-fallback op tracking" in proc.stdout
