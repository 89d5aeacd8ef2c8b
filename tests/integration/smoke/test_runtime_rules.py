"""The simulated device follows the Neuron runtime's rules (tests/simdevice/README.md); verify-device passes on it."""

from __future__ import annotations

import grp
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from neuron_smoke import cores
from neuron_smoke.errors import UsageError
from tests.integration.smoke.conftest import REPO, Verify
from tests.integration.smoke.forkserver import ForkServer

DEVICE_ONLY = "--stages=environment,device"


SimPython = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def sim_python(forkserver: ForkServer) -> SimPython:
    """Runs `code` in a fresh process (forked after `import torch`) with the simulated device importable; warnings
    always shown."""
    prelude = "import warnings; warnings.simplefilter('always'); import torch, torch_neuronx\n"

    def run(env: dict[str, str], code: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return forkserver.run(env, prelude + code, timeout)

    return run


# ---- the simulated device's rules ----


def test_cores_belong_to_one_process_and_a_forked_child_must_ask_again(
    sim_env: dict[str, str], sim_python: SimPython
) -> None:
    code = (
        "import os\n"
        "x = torch.ones(1, device='neuron')\n"
        "print('count', torch.accelerator.device_count(), flush=True)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    try:\n"
        "        torch.ones(1, device='neuron')\n"
        "        print('child got the cores', flush=True)\n"
        "    except RuntimeError as exc:\n"
        "        print('child:', exc, flush=True)\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "print('parent', os.getpid(), flush=True)\n"
    )
    proc = sim_python(sim_env, code)
    assert proc.returncode == 0, proc.stderr
    parent = proc.stdout.split("parent ")[1].split()[0]
    assert "count 8" in proc.stdout  # two device nodes, 4 logical cores each at LNC=2
    assert "NeuronCore(s) not available - Requested:nc0-nc7 Available:0" in proc.stdout
    assert f"held by process pid {parent}" in proc.stdout
    assert "child got the cores" not in proc.stdout


def test_visible_cores_select_and_separate_processes(sim_env: dict[str, str], sim_python: SimPython) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import torch, torch_neuronx, sys; torch.ones(1, device='neuron'); print('held', "
         "flush=True); sys.stdin.read()"],
        env={**sim_env, "NEURON_RT_VISIBLE_CORES": "1-2"}, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        probe = "x = torch.ones(1, device='neuron'); print('ok', torch.accelerator.device_count())"
        apart = sim_python({**sim_env, "NEURON_RT_VISIBLE_CORES": "3,5-6"}, probe)
        assert apart.returncode == 0 and "ok 3" in apart.stdout, apart.stderr
        overlap = sim_python({**sim_env, "NEURON_RT_VISIBLE_CORES": "2-3"}, probe)
        assert overlap.returncode == 1
        assert f"Requested:nc2-nc3 Available:0. The cores are held by process pid {holder.pid}" in overlap.stderr
        at_lnc1 = sim_python({**sim_env, "NEURON_LOGICAL_NC_CONFIG": "1", "NEURON_RT_VISIBLE_CORES": "3"}, probe)
        assert at_lnc1.returncode == 1 and "not available" in at_lnc1.stderr  # physical core 3 is logical core 1's
        missing = sim_python({**sim_env, "NEURON_RT_VISIBLE_CORES": "8"}, probe)
        assert missing.returncode == 1 and "names NeuronCore(s) [8] but only 8 are present" in missing.stderr
        few = sim_python({**sim_env, "NEURON_RT_NUM_CORES": "2"}, "print('n', torch.accelerator.device_count())")
        assert "n 2" in few.stdout
    finally:
        holder.communicate(input="", timeout=30)


def test_first_use_compiles_once_and_a_second_process_loads_from_the_cache(
    sim_env: dict[str, str], tmp_path: Path, sim_python: SimPython
) -> None:
    code = (
        "import time\n"
        "t = time.perf_counter(); x = torch.ones(64, 64, device='neuron'); y = (x @ x).relu().sum().item()\n"
        "first = time.perf_counter() - t\n"
        "y = (x @ x).relu().sum().item()\n"
        "print('stats', *torch.ops.neuron_sim.compile_stats(), 'first', first)\n"
    )
    env = {**sim_env, "NEURON_SIM_COMPILE_MS": "200", "NEURON_SIM_CACHE_LOAD_MS": "1"}
    cold, warm = sim_python(env, code), sim_python(env, code)
    assert cold.returncode == 0 and warm.returncode == 0, cold.stderr + warm.stderr
    c, w = cold.stdout.split(), warm.stdout.split()
    misses = int(c[1])
    assert misses >= 3 and int(c[2]) == 0  # ones, mm, relu, sum: compiled on first use
    assert float(c[4]) >= misses * 0.2  # each compile costs its latency (a lower bound; speed is for benchmarks)
    assert int(w[1]) == 0 and int(w[2]) == misses  # the new process loads every one from the cache
    # TorchNeuron's layout (pre-release PersistentCacheBackend.cpp): <cache>/<k[0:2]>/<k[2:4]>/<k>.neff, 32 hex digits
    entries = sorted((tmp_path / "neff-cache").rglob("*.neff"))
    assert len(entries) == misses
    for entry in entries:
        key, shard = entry.stem, entry.relative_to(tmp_path / "neff-cache").parts
        assert len(key) == 32 and int(key, 16) >= 0 and shard == (key[:2], key[2:4], f"{key}.neff")


def test_fallback_compile_and_float64_rules(sim_env: dict[str, str], sim_python: SimPython) -> None:
    code = (
        "a = torch.randn(4, 4).to('neuron')\n"
        "q, r = torch.linalg.qr(a)\n"
        "print('fallback', sorted(torch_neuronx.get_fallback_ops()))\n"
        "f = torch.compile(lambda t: torch.linalg.qr(t)[0] + 1, backend='neuron', dynamic=False)\n"
        "try:\n"
        "    f(a); print('compiled')\n"
        "except Exception as exc:\n"
        "    print('compile failed:', type(exc).__name__, ' '.join(str(exc).split()))\n"
        "d = torch.full((2,), 1.0, dtype=torch.float64, device='neuron') + 2.0 ** -40\n"
        "print('float64 kept', bool((d.cpu() == 1.0 + 2.0 ** -40).all()))\n"
    )
    graphs = (  # two shapes, a repeat, and after Dynamo's reset the first shape again: loaded from the NEFF cache
        "g = torch.compile(lambda t: t * 2, backend='neuron', dynamic=False)\n"
        "g(a); g(a[:2]); g(a); torch._dynamo.reset(); g(a)\n"
        "c = torch_neuronx.compile_cache_stats()\n"
        "print('graphs', c['compiles'], c['hits'], c['failed'])\n"
    )
    proc = sim_python(sim_env, code + graphs)
    assert proc.returncode == 0, proc.stderr
    assert "fallback ['aten::linalg_qr']" in proc.stdout
    assert "[Neuron] [WARNING] Operator 'aten::linalg_qr' fell back to CPU" in proc.stderr
    assert "compile failed:" in proc.stdout and "cannot lower aten::linalg_qr" in proc.stdout
    assert "float64 kept False" in proc.stdout
    assert "float64 is not supported on Neuron: computing in float32" in proc.stderr
    # torch_neuronx.compile_cache_stats() (the twin's own): 2 graphs compiled, 1 loaded, the qr graph refused
    assert "graphs 2 1 1" in proc.stdout

    eager = sim_python({**sim_env, "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION": "0"}, code)
    assert "compiled" in eager.stdout.splitlines() and "running it eagerly" in eager.stderr
    eager_only = code.replace("f(a); print('compiled')", "pass")  # no torch.compile: the rules below are eager ones
    off = sim_python({**sim_env, "NEURON_SIM_RULES_OFF": "float64,eager_fallback"}, eager_only)
    assert "float64 kept True" in off.stdout and "fallback []" in off.stdout


def test_convolutions_run_on_the_device_like_every_other_op(sim_env: dict[str, str], sim_python: SimPython) -> None:
    """convolution_overrideable and its backward (what PrivateUse1 convolutions dispatch to) are the device's:
    results equal the CPU's, the ops are tracked, compiled on first use, and can be made to fall back."""
    code = (
        "torch.manual_seed(0)\n"
        "def step(conv, x):\n"
        "    x = x.clone().requires_grad_()\n"
        "    out = conv(x); out.square().sum().backward()\n"
        "    return [out.detach().cpu(), x.grad.cpu()] + [p.grad.cpu() for p in conv.parameters()]\n"
        "for conv, shape in ((torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), (2, 4, 9, 9)),\n"
        "                    (torch.nn.ConvTranspose1d(4, 6, 3, stride=2, groups=2), (2, 4, 7))):\n"
        "    x = torch.randn(shape)\n"
        "    ref = step(conv, x); conv.zero_grad()\n"
        "    got = step(conv.to('neuron'), x.to('neuron'))\n"
        "    print('equal', all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(ref, got)), len(got))\n"
        "ops = set(torch_neuronx.get_executed_ops()) | set(torch_neuronx.get_fallback_ops())\n"
        "print('conv ops', sorted(o for o in ops if 'convolution' in o))\n"
        "print('fallback', sorted(set(torch_neuronx.get_fallback_ops())))\n"
        "print('eager compiles', torch_neuronx.compile_cache_stats()['eager_compiles'])\n"
    )
    names = ["aten::convolution_backward_overrideable", "aten::convolution_overrideable"]
    proc = sim_python(sim_env, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("equal True 4") == 2, proc.stdout
    assert f"conv ops {names}" in proc.stdout and "fallback []" in proc.stdout
    assert int(proc.stdout.split("eager compiles ")[1].split()[0]) >= 4  # two convs, forward and backward
    fell = sim_python({**sim_env, "NEURON_SIM_FALLBACK_OPS": ",".join(names)}, code)
    assert fell.returncode == 0 and fell.stdout.count("equal True 4") == 2, fell.stderr
    assert f"fallback {names}" in fell.stdout
    assert "Operator 'aten::convolution_overrideable' fell back to CPU" in fell.stderr


# ---- verify-device on those rules ----


def test_too_few_cores_for_ranks_beside_this_process_skips_collectives(
    sim_env: dict[str, str], tmp_path: Path, fverify: Verify
) -> None:
    run = fverify({**sim_env, "NEURON_RT_VISIBLE_CORES": "4-5"}, "--stages=environment,device,collectives",
                 tmp=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.output
    assert run.stage("collectives")["status"] == "skip"
    assert "2 NeuronCore(s) visible: all_reduce over 2 ranks needs 2 besides" in run.stage("collectives")["reason"]


@pytest.fixture
def first_run(sim_env: dict[str, str], tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A verify-device whose matmul never returns, so it holds its NeuronCore for up to 60 s."""
    env = {**sim_env, "NEURON_SIM_FAULT": "hang"}
    args = ["--stages=environment,device,matmul", "--timeout", "60", "--report", str(tmp_path / "first.json")]
    proc = subprocess.Popen([str(REPO / "scripts" / "verify-device.sh"), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if "device" in line and ("PASS" in line or "FAIL" in line):
            assert "PASS" in line, line
            break
    yield proc
    proc.kill()
    proc.wait(timeout=30)


def test_a_second_concurrent_run_fails_at_the_device_stage_naming_the_holder(
    first_run: subprocess.Popen[str], sim_env: dict[str, str], tmp_path: Path, fverify: Verify
) -> None:
    second = tmp_path / "second"
    second.mkdir()
    run = fverify(sim_env, "--stages=environment,device,matmul", tmp=second)
    assert run.returncode == 1
    device = run.stage("device")
    assert device["status"] == "fail"
    assert device["failures"] == [
        "the device is held by another process: NRT:nrt_allocate_neuron_cores NeuronCore(s) not available - "
        f"Requested:nc2 Available:0. The cores are held by process pid {first_run.pid} (NeuronCores belong to one "
        "process; restrict each process with NEURON_RT_VISIBLE_CORES)"
    ]
    assert run.stage("matmul")["reason"] == "skipped: stage device failed"


@pytest.mark.parametrize(("container", "passes"), [("1", True), ("0", False)])
def test_instance_count_only_when_the_whole_instance_is_visible(
    sim_env: dict[str, str], tmp_path: Path, container: str, passes: bool, fverify: Verify
) -> None:
    env = {**sim_env, "NEURON_SMOKE_CONTAINER": container}
    run = fverify(env, DEVICE_ONLY, "--instance-type", "trn2.48xlarge", tmp=tmp_path)
    device = run.stage("device")
    assert device["numbers"]["instance_device_count"] == 64 and device["numbers"]["visible_cores"] == 8
    if passes:
        assert run.returncode == 0, run.output
        assert "2 of the 16 device nodes of a trn2.48xlarge were passed to this container" in device["notes"][-1]
    else:  # on a host every device of the instance must be visible
        assert run.returncode == 1
        assert device["failures"] == ["8 NeuronCore(s) visible to this run, expected 64 for trn2.48xlarge"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a device node and to drop CAP_DAC_OVERRIDE")
def test_a_device_node_this_user_may_not_open_is_named_a_permission_problem(
    sim_env: dict[str, str], tmp_path: Path
) -> None:
    # A real character device (the same as /dev/null), mode 0660 nobody:nogroup, opened by root without the
    # capability that lets root ignore file modes: as a non-root user outside the device's group would be.
    dev = tmp_path / "perm-dev"
    dev.mkdir()
    node = dev / "neuron0"
    os.mknod(node, 0o660 | stat.S_IFCHR, os.makedev(1, 3))
    os.chown(node, 65534, 65534)
    node.chmod(0o660)  # mknod applies the umask
    group = grp.getgrgid(65534).gr_name
    env = {**sim_env, "NEURON_SMOKE_DEV_GLOB": str(dev / "neuron*"), "NEURON_SIM_DEV_DIR": str(dev)}
    no_override = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    report = tmp_path / "report.json"
    args = [str(REPO / "scripts" / "verify-device.sh"), DEVICE_ONLY, "--report", str(report)]
    refused = subprocess.run([*no_override, *args], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    device = next(s for s in json.loads(report.read_text())["stages"] if s["name"] == "device")
    assert device["failures"] == [
        f"{node} is present but this user (uid 0) may not open it (mode 0660, group {group}, gid 65534): a "
        f"permission problem, not a missing device. On the host add the user to that group (`sudo usermod -aG "
        f"{group} $USER`, then log in again); in a container pass the group too: `docker run --device={node} "
        "--group-add 65534 ...`."
    ]
    in_group = [*no_override, "--groups=65534"]  # what `docker run --group-add 65534` gives the container's user
    allowed = subprocess.run([*in_group, *args], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr


# ---- the core plan ----


def test_core_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES", "NEURON_LOGICAL_NC_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    plan = cores.plan(node_count=16, nproc=2)
    assert (len(plan.available), plan.ranks, plan.process, plan.user_restricted) == (64, (0, 1), (2,), False)
    assert cores.plan(node_count=0, nproc=2).process == ()
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "4,6-9")
    plan = cores.plan(node_count=16, nproc=2)
    assert (plan.ranks, plan.process, plan.user_restricted) == ((4, 6), (7,), True)
    assert cores.format_cores((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "3-1")
    with pytest.raises(UsageError, match="is not a core list"):
        cores.plan(node_count=1, nproc=2)
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "")
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    assert len(cores.plan(node_count=16, nproc=2).available) == 128
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "4")
    with pytest.raises(UsageError, match="accepts only 1 or 2"):
        cores.plan(node_count=16, nproc=2)


def test_a_bad_core_setting_fails_the_device_stage(sim_env: dict[str, str], tmp_path: Path, fverify: Verify) -> None:
    start = time.monotonic()
    run = fverify({**sim_env, "NEURON_RT_VISIBLE_CORES": "two"}, DEVICE_ONLY, tmp=tmp_path)
    assert run.returncode == 1 and time.monotonic() - start < 60
    assert run.stage("device")["failures"] == [
        "NEURON_RT_VISIBLE_CORES='two' is not a core list such as 0, 0-3 or 0,2-3"
    ]
