"""Fixtures for testing the smoke suite: the simulated neuron device (built once) and verify-device runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import REPO_ROOT, load_module
from tests.integration.smoke.forkserver import ForkServer
from tests.simdevice.environment import SIM_SITE, sim_environment

REPO = REPO_ROOT
SMOKE_DIR = REPO / "smoke_tests"
VERIFY = REPO / "scripts" / "verify-device.sh"

sys.path.insert(0, str(SMOKE_DIR))
from neuron_cell.cellrecord import schema_version  # noqa: E402  (beside the suite, as verify-device.sh puts it)

# The cell record's version (neuron_cell/cell.schema.json): verify-device refuses any other.
CELL_SCHEMA = schema_version()

# The 2.13 test cell of CI, matching the simulated packages in tests/simdevice/site.
SIM_CELL = {
    "schema": CELL_SCHEMA,
    "id": "2.13-py3.11-ubuntu24.04",
    "family": "2.13",
    "python": "3.11",
    "torch": "2.13.0+cpu",
    "torch_neuronx": "2.13.3.0.*",
    "neuronx_cc": "2.28.7631.0",
    "nki": "0.7.0",
    "locked": {"torch": "2.13.0+cpu", "nki": "0.7.0"},
}


@dataclass
class Run:
    returncode: int
    output: str
    report: dict[str, Any]
    elapsed_s: float
    left_behind: list[int] | None = None  # verify_together: processes of the run still alive after it exited

    def stage(self, name: str) -> dict[str, Any]:
        return next(s for s in self.report["stages"] if s["name"] == name)


# How long one verify-device run of the harness may take before it counts as hung: a ceiling, not a speed check (the
# runs take 5 to 60 s alone, and up to about 3 times that while scripts/test.sh runs the heavy files beside them on
# 2 cores: one of 57 s alone passed 120 s there).
HANG = 600.0


def _load_sim_builder() -> Any:
    return load_module(SIM_SITE / "neuron_sim.py", "neuron_sim_builder")


@pytest.fixture(scope="session")
def sim_library() -> Path:
    """Compile the simulated device once (cached by source hash under build/simdevice)."""
    return Path(_load_sim_builder().build())


def make_base_env(folder: Path) -> dict[str, str]:
    """An environment with no pins, no IMDS and no Neuron device files, independent of the host."""
    keep = {"NEURON_SIM_BUILD_DIR"}  # where the session built the simulated device
    dropped = ("NEURON_", "TORCH_NEURONX_", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k in keep or not k.startswith(dropped)}
    env.update(
        NEURON_TORCH_PYTHON=sys.executable,
        NEURON_SMOKE_IMDS="0",
        NEURON_SMOKE_DEFAULT_CELL_FILE=str(folder / "no-cell.json"),
        NEURON_SMOKE_DEV_GLOB=str(folder / "no-dev" / "neuron*"),
    )
    return env


@pytest.fixture
def base_env(tmp_path: Path) -> dict[str, str]:
    return make_base_env(tmp_path)


@pytest.fixture
def sim_env(base_env: dict[str, str], sim_library: Path, tmp_path: Path) -> dict[str, str]:
    """The simulated device's environment (tests/simdevice/environment.py) with a runtime folder and compile cache of
    this test's own."""
    return sim_environment(base_env, tmp_path)


@pytest.fixture(scope="module")
def module_sim_env(sim_library: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], Path]:
    """As sim_env, for a module's shared runs (a folder of the module's own), with that folder."""
    folder = tmp_path_factory.mktemp("module-sim")
    return sim_environment(make_base_env(folder), folder), folder


@pytest.fixture(scope="session")
def clean_sim_run(sim_library: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One whole clean run on the simulated device (every stage, every runtime rule on, the fork launcher), read by
    every test that checks a clean run: a verify-device run costs tens of seconds, and a clean one gives the same
    report to each reader. At default settings (the throughput size aside): the simulated device runs at its share of
    the peak the test release documents for it, and the throughput floor is a share of the same. A whole run
    (compile's fresh processes and the collectives included) gets 360 s."""
    folder = tmp_path_factory.mktemp("clean-sim")
    cell = folder / "cell.json"
    cell.write_text(json.dumps(SIM_CELL))
    env = sim_environment(make_base_env(folder), folder)
    args = ("--cell-file", str(cell), "--throughput-size=256", "--expected-devices", "8")
    return verify(env, *args, "--launcher", "fork", tmp=folder, timeout=360)


@pytest.fixture
def cell_file(tmp_path: Path) -> Path:
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(SIM_CELL))
    return path


@pytest.fixture(scope="session")
def forkserver(sim_library: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    """One process that imported torch and Dynamo, forked for fresh processes (forkserver.py beside this file)."""
    server = ForkServer(make_base_env(tmp_path_factory.mktemp("forkserver")))
    yield server
    server.close()


def verify(env: dict[str, str], *args: str, tmp: Path, timeout: float = HANG, forked: ForkServer | None = None) -> Run:
    """scripts/verify-device.sh ARGS in ENV; with `forked`, `python -m neuron_smoke ARGS` as that script starts it
    (the suite's folder first on PYTHONPATH), in a process forked from the fork server instead of a new interpreter
    (for the runs that test the stages, not the process: a test of the script, the interpreter, the processes left
    behind or a watchdog's timing runs the script)."""
    report = tmp / "report.json"
    argv = ["--report", str(report), *args]
    start = time.monotonic()
    if forked is not None and env.get("NEURON_TORCH_PYTHON") == sys.executable:
        pythonpath = os.pathsep.join(p for p in (str(SMOKE_DIR), env.get("PYTHONPATH")) if p)
        code = f"import runpy, sys\nsys.argv = ['neuron_smoke', *{argv!r}]\n"
        code += "runpy.run_module('neuron_smoke', run_name='__main__')\n"
        proc = forked.run({**env, "PYTHONPATH": pythonpath}, code, timeout)
    else:
        proc = subprocess.run(
            [str(VERIFY), *argv], env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    elapsed = time.monotonic() - start
    output = proc.stdout + proc.stderr
    data = json.loads(report.read_text()) if report.exists() else {}
    print(output)
    return Run(proc.returncode, output, data, elapsed)


def verify_together(jobs: dict[str, tuple[dict[str, str], tuple[str, ...], Path]], timeout: float) -> dict[str, Run]:
    """Several scripts/verify-device.sh runs at once (runs that mostly wait: hangs, timeouts), each NAME: (env, args,
    its own folder). When a run's env sets a variable named NEURON_SMOKE_TEST_TAG_<unique>, its Run.left_behind lists
    the processes still carrying it half a second after that run exited, as a test running it alone would see them."""
    started = {}
    for name, (env, args, folder) in jobs.items():
        out = (folder / "output.txt").open("w")
        cmd = [str(VERIFY), "--report", str(folder / "report.json"), *args]
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        started[name] = (proc, out, time.monotonic())
    runs: dict[str, Run] = {}
    deadline = time.monotonic() + timeout
    while len(runs) < len(started):
        for name, (proc, out, start) in started.items():
            if name in runs or proc.poll() is None:
                continue
            elapsed = time.monotonic() - start
            out.close()
            time.sleep(0.5)
            tags = [k for k in jobs[name][0] if k.startswith("NEURON_SMOKE_TEST_TAG_")]
            folder = jobs[name][2]
            report = folder / "report.json"
            data = json.loads(report.read_text()) if report.exists() else {}
            output = (folder / "output.txt").read_text()
            print(f"---- {name}\n{output}")
            runs[name] = Run(proc.returncode, output, data, elapsed, [p for t in tags for p in processes_tagged(t)])
        if time.monotonic() > deadline:
            for proc, _, _ in started.values():
                proc.kill()
            raise subprocess.TimeoutExpired(sorted(set(started) - set(runs)), timeout)
        time.sleep(0.2)
    return runs


def processes_tagged(tag: str) -> list[int]:
    """The processes whose environment holds TAG (an env variable name set for one run)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and tag.encode() in Path(f"/proc/{entry}/environ").read_bytes():
                found.append(int(entry))
        except OSError:
            continue
    return found


Verify = Callable[..., Run]


@pytest.fixture
def fverify(forkserver: ForkServer) -> Verify:
    """verify(), forked from the fork server (see verify): for tests of the stages, not of the process."""

    def run(env: dict[str, str], *args: str, tmp: Path, timeout: float = HANG) -> Run:
        return verify(env, *args, tmp=tmp, timeout=timeout, forked=forkserver)

    return run
