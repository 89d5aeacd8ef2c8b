"""The collectives stage's launchers: forked ranks report results, failures and hangs; torchrun still works."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from neuron_smoke import collective_worker, launchers
from tests.integration.smoke.conftest import Verify
from tests.testbed.processes import alive


def _job(tmp_path: Path, process_group: str = "gloo") -> launchers.RankJob:
    return launchers.RankJob(nproc=2, device="cpu", process_group=process_group, timeout_s=20.0, result_dir=tmp_path)


def test_forked_ranks_all_reduce(tmp_path: Path) -> None:
    launcher = launchers.ForkLauncher()
    try:
        result = launcher.launch(_job(tmp_path), deadline_s=30.0)
    finally:
        launcher.close()
    assert result.returncode == 0, result.output
    assert not result.timed_out
    assert sorted(p.name for p in tmp_path.glob("rank-*.json")) == ["rank-0.json", "rank-1.json"]
    assert '"value": 3.0' in (tmp_path / "rank-1.json").read_text()
    assert not alive(launcher.pid, group=True)


def test_a_failing_rank_reports_its_traceback(tmp_path: Path) -> None:
    launcher = launchers.ForkLauncher()
    try:
        result = launcher.launch(_job(tmp_path, process_group="no-such-backend"), deadline_s=30.0)
        again = launcher.launch(_job(tmp_path), deadline_s=30.0)
    finally:
        launcher.close()
    assert result.returncode == 1
    assert "[rank-0] Traceback" in result.output and "no-such-backend" in result.output
    assert again.returncode == 1 and "one launch per run" in again.output


def test_a_hung_rank_is_killed_at_the_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The ranks are forked from a launcher forked now, so they inherit this patch: rank 1 never returns.
    def hang_on_rank_one(*args: object, **kwargs: object) -> None:
        if os.environ["RANK"] == "1":
            signal.pause()

    monkeypatch.setattr(collective_worker, "run_rank", hang_on_rank_one)
    launcher = launchers.ForkLauncher()
    start = time.monotonic()
    try:
        result = launcher.launch(_job(tmp_path), deadline_s=2.0)
    finally:
        launcher.close()
    assert result.timed_out
    assert 2.0 <= time.monotonic() - start < 10.0
    assert not alive(launcher.pid, group=True), "the launcher's process group (launcher and ranks) must be killed"


def test_an_unused_launcher_exits_when_closed() -> None:
    launcher = launchers.ForkLauncher()
    launcher.close()
    assert not alive(launcher.pid, group=True)


def test_torchrun_launcher_end_to_end(base_env: dict[str, str], tmp_path: Path, fverify: Verify) -> None:
    run = fverify(base_env, "--device", "cpu", "--stages", "environment,device,collectives", "--launcher", "torchrun",
                 tmp=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.output
    collectives = run.stage("collectives")["numbers"]
    assert collectives["launcher"] == "torchrun"
    assert "torch.distributed.run --standalone --local-addr 127.0.0.1" in collectives["command"]
    assert [r["value"] for r in collectives["results"]] == [3.0, 3.0]
