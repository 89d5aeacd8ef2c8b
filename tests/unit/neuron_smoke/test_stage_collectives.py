"""stage_collectives.py with a stand-in launcher (no process group, no loopback): the expected sum N(N+1)/2, a rank
with a wrong sum, ranks that did not answer or gave up, a timed-out launch, and the skips where the stage cannot run
(too few devices or NeuronCores, an unregistered process group)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import torch

from neuron_smoke import cores, stage_collectives
from neuron_smoke.backends import CPU, CUDA, NEURON
from neuron_smoke.context import Context, Options, StageLog
from neuron_smoke.errors import Skip
from neuron_smoke.launchers import LaunchResult, RankJob


class FakeLauncher:
    """Writes the given rank results into the job's result folder, as the ranks would, and returns `result`."""

    name = "fake"

    def __init__(self, results: list[dict[str, Any]], returncode: int = 0, timed_out: bool = False) -> None:
        self.results, self.returncode, self.timed_out = results, returncode, timed_out
        self.jobs: list[RankJob] = []

    def launch(self, job: RankJob, deadline_s: float) -> LaunchResult:
        self.jobs.append(job)
        for r in self.results:
            (job.result_dir / f"rank-{r['rank']}.json").write_text(json.dumps(r))
        return LaunchResult(self.returncode, "line\n" * 20 + "last line", "fake launch", self.timed_out)

    def close(self) -> None:
        pass


def _ctx(launcher: FakeLauncher | None, nproc: int = 3, **options: Any) -> Context:
    return Context(options=Options(device="cpu", nproc=nproc, **options), backend=CPU, launcher=launcher)


def _answers(nproc: int) -> list[dict[str, Any]]:
    return [{"rank": r, "world_size": nproc, "value": nproc * (nproc + 1) / 2} for r in range(nproc)]


def test_every_rank_with_the_sum_passes() -> None:
    launcher = FakeLauncher(_answers(3))
    log = StageLog()
    stage_collectives.run(_ctx(launcher, timeout_s=60.0), log)
    assert log.failures == [] and "= 6" in log.summary
    assert log.numbers["expected_sum"] == 6 and [r["rank"] for r in log.numbers["results"]] == [0, 1, 2]
    assert log.numbers["process_group"] == "gloo" and log.numbers["launcher"] == "fake"
    job = launcher.jobs[0]
    assert (job.nproc, job.device, job.process_group, job.cores) == (3, "cpu", "gloo", ())
    assert job.timeout_s == 55.0  # a margin inside the stage's deadline
    assert not job.result_dir.exists()  # a temporary folder, gone after the stage


def test_a_wrong_sum_names_the_rank() -> None:
    results = _answers(2)
    results[1]["value"] = 4.0
    log = StageLog()
    stage_collectives.run(_ctx(FakeLauncher(results), nproc=2), log)
    assert len(log.failures) == 1 and "rank 1" in log.failures[0] and "4.0" in log.failures[0]
    assert log.summary == ""


def test_a_failed_launch_names_the_silent_ranks_and_keeps_the_output_tail() -> None:
    log = StageLog()
    stage_collectives.run(_ctx(FakeLauncher(_answers(3)[:1], returncode=1)), log)
    (failure,) = log.failures
    assert "1/3 rank results" in failure and "rank 1, 2 did not answer" in failure
    assert failure.endswith("last line") and failure.count("line\n") == 14  # the last 15 lines of the output


def test_a_timed_out_launch_says_who_gave_up() -> None:
    gave_up = {"rank": 0, "world_size": 2, "phase": "all_reduce", "error": "timed out"}
    log = StageLog()
    stage_collectives.run(_ctx(FakeLauncher([gave_up], timed_out=True), nproc=2, timeout_s=20.0), log)
    (failure,) = log.failures
    assert "timed out after 15s" in failure
    assert "rank 1 did not answer; rank 0 gave up waiting" in failure


def test_who_is_empty_when_everyone_answered() -> None:
    assert stage_collectives._who(_answers(2), 2) == ""


def test_too_few_gpus_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.accelerator, "device_count", lambda: 1)
    ctx = Context(options=Options(device="cuda", nproc=2), backend=CUDA)
    with pytest.raises(Skip, match=r"1 cuda device\(s\) visible, 2 needed"):
        stage_collectives.run(ctx, StageLog())


def test_an_unregistered_process_group_fails_naming_it() -> None:
    backend = dataclasses.replace(CPU, process_group="no-such-group")
    log = StageLog()
    stage_collectives.run(Context(options=Options(device="cpu"), backend=backend, launcher=FakeLauncher([])), log)
    assert len(log.failures) == 1 and "'no-such-group' is not registered" in log.failures[0]


def test_neuron_ranks_need_a_core_each_besides_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cores, "current", lambda: None)
    with pytest.raises(Skip, match="0 NeuronCore"):
        stage_collectives._rank_cores("neuron", 2)
    few = cores.CorePlan(available=(0, 1), process=(0, 1), ranks=(), user_restricted=False)
    monkeypatch.setattr(cores, "current", lambda: few)
    with pytest.raises(Skip, match="at least 3"):
        stage_collectives._rank_cores(NEURON.name, 2)
    enough = cores.CorePlan(available=(0, 1, 2), process=(2,), ranks=(0, 1), user_restricted=False)
    monkeypatch.setattr(cores, "current", lambda: enough)
    assert stage_collectives._rank_cores("neuron", 2) == (0, 1)
    assert stage_collectives._rank_cores("cpu", 2) == ()
