"""Unit tests of neuron_smoke.collective_worker without a process group: run_rank over a stand-in for
torch.distributed (no rendezvous, no loopback store), its per-rank result files, the core it takes, the shortened
timeout, and main's argument parsing."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch

from neuron_smoke import collective_worker


class FakeDist:
    """The calls run_rank makes on torch.distributed: all_reduce multiplies by the world size (every rank equal)."""

    ReduceOp = torch.distributed.ReduceOp

    def __init__(self, fail_in: str = "") -> None:
        self.fail_in = fail_in
        self.init: dict[str, Any] = {}
        self.initialized = False
        self.destroyed = False

    def init_process_group(self, **kwargs: Any) -> None:
        if self.fail_in == "init_process_group":
            raise RuntimeError("rendezvous timed out")
        self.init, self.initialized = kwargs, True

    def all_reduce(self, value: torch.Tensor, op: Any) -> None:
        assert op == self.ReduceOp.SUM
        if self.fail_in == "all_reduce":
            raise RuntimeError("peer vanished " + "x" * 600)
        value.mul_(self.init["world_size"])

    def is_initialized(self) -> bool:
        return self.initialized

    def destroy_process_group(self) -> None:
        self.destroyed, self.initialized = True, False


@pytest.fixture
def rank_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"RANK": "1", "WORLD_SIZE": "3", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    for name in ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES"):
        monkeypatch.setenv(name, "")  # recorded, so that what run_rank sets is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)


def _run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake: FakeDist, **kwargs: Any) -> dict[str, Any]:
    monkeypatch.setattr(collective_worker, "dist", fake)
    try:
        collective_worker.run_rank("cpu", "gloo", 60.0, tmp_path, **kwargs)
    finally:
        assert list(tmp_path.glob("*.tmp")) == [], "a result file is whole or absent"
    result: dict[str, Any] = json.loads((tmp_path / "rank-1.json").read_text())
    return result


@pytest.mark.usefixtures("rank_env")
def test_a_rank_records_the_reduced_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeDist()
    assert _run(monkeypatch, tmp_path, fake) == {"rank": 1, "world_size": 3, "value": 2.0 * 3}
    assert (fake.init["backend"], fake.init["rank"], fake.init["world_size"]) == ("gloo", 1, 3)
    assert fake.init["init_method"] == "env://" and fake.init["timeout"] == timedelta(seconds=60)
    assert fake.destroyed


@pytest.mark.usefixtures("rank_env")
@pytest.mark.parametrize("phase", ["init_process_group", "all_reduce"])
def test_a_rank_that_gives_up_says_where_and_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, phase: str) -> None:
    fake = FakeDist(fail_in=phase)
    with pytest.raises(RuntimeError):
        _run(monkeypatch, tmp_path, fake)
    result = json.loads((tmp_path / "rank-1.json").read_text())
    assert (result["rank"], result["world_size"], result["phase"]) == (1, 3, phase)
    assert result["error"].startswith("RuntimeError: ") and len(result["error"]) <= 500
    assert fake.destroyed == (phase == "all_reduce")


@pytest.mark.usefixtures("rank_env")
def test_a_rank_takes_its_own_core(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_RT_NUM_CORES", "8")
    _run(monkeypatch, tmp_path, FakeDist(), cores=(4, 6, 7))
    assert os.environ["NEURON_RT_VISIBLE_CORES"] == "6" and "NEURON_RT_NUM_CORES" not in os.environ


@pytest.mark.usefixtures("rank_env")
def test_give_up_at_shortens_the_timeout_to_at_least_a_second(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeDist()
    _run(monkeypatch, tmp_path, fake, give_up_at=time.time() + 20)
    assert 15 <= fake.init["timeout"].total_seconds() <= 20
    _run(monkeypatch, tmp_path, fake, give_up_at=time.time() - 100)
    assert fake.init["timeout"] == timedelta(seconds=1)
    _run(monkeypatch, tmp_path, fake, give_up_at=time.time() + 10_000)
    assert fake.init["timeout"] == timedelta(seconds=60)


def test_main_parses_the_launcher_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(collective_worker, "run_rank", lambda *args: calls.append(args))
    argv = ["collective_worker", "--device", "cpu", "--process-group", "gloo", "--result-dir", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", [*argv, "--cores", "0,3", "--timeout", "5", "--give-up-at", "12.5"])
    collective_worker.main()
    monkeypatch.setattr(sys, "argv", argv)
    collective_worker.main()
    assert calls == [("cpu", "gloo", 5.0, tmp_path, (0, 3), 12.5), ("cpu", "gloo", 60.0, tmp_path, (), None)]
