"""Unit tests of neuron_smoke.compile_probe: counting the compiled artifacts in the cache folder, the device's graph
counters, and main's one JSON line (a tiny --model on the CPU, with torch.compile stood in by a wrapper that writes an
artifact the way a cold compile does, after an eager call that writes one the way an eager kernel's first use does)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from neuron_smoke import compile_probe

FACTORY = """
import torch


def factory():
    return torch.nn.Linear(4, 2), torch.ones(3, 4)
"""


@pytest.fixture
def probe_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A --model factory importable as probe_model:factory (forgotten again after the test)."""
    (tmp_path / "probe_model.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "probe_model:factory"
    sys.modules.pop("probe_model", None)


def test_cache_entries_count_neff_files_at_any_depth(tmp_path: Path) -> None:
    assert compile_probe.cache_entries(tmp_path / "missing") == 0
    (tmp_path / "a" / "b").mkdir(parents=True)
    for name in ("a/one.neff", "a/b/two.neff", "three.neff", "a/model.hlo", "a/b/neff.txt"):
        (tmp_path / name).write_text("x")
    assert compile_probe.cache_entries(tmp_path) == 3


def test_main_times_the_first_call_and_counts_the_cache_around_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], probe_model: str
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "old.neff").write_text("from an earlier run")
    monkeypatch.setenv(compile_probe.CACHE_ENV, str(cache))
    compiled: list[dict[str, Any]] = []

    real_forward, real_load, events = torch.nn.Linear.forward, compile_probe.models.load, []

    def load(name: str | None) -> Any:
        spec = real_load(name)
        events.clear()  # the factory's own checks ran the model: only the probe's calls count
        return spec

    monkeypatch.setattr(compile_probe.models, "load", load)

    def eager_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        events.append("eager")  # an eager kernel compiled on first use: an entry of the cache
        (cache / "ab" / "cd").mkdir(parents=True, exist_ok=True)
        (cache / "ab" / "cd" / "abcd0000.neff").write_text("eager kernel")
        return real_forward(self, x)

    monkeypatch.setattr(torch.nn.Linear, "forward", eager_forward)

    def fake_compile(model: torch.nn.Module, **options: Any) -> Callable[..., torch.Tensor]:
        compiled.append(options)
        events.append("compile")

        def call(*args: torch.Tensor) -> torch.Tensor:
            events.append("call")
            (cache / f"{len(list(cache.rglob('*.neff')))}.neff").write_text("compiled graph")
            with torch.no_grad():
                out: torch.Tensor = real_forward(model, *args)  # type: ignore[arg-type]
            return out

        return call

    monkeypatch.setattr(torch, "compile", fake_compile)
    argv = ["compile_probe", "--device", "cpu", "--backend", "my-backend", "--model", probe_model]
    monkeypatch.setattr(sys, "argv", argv)
    compile_probe.main()
    line = capsys.readouterr().out.strip()
    result = json.loads(line)
    assert events == ["eager", "compile", "call"]  # the eager kernels into the cache before the count
    assert (result["entries_before"], result["entries_after"]) == (2, 3)  # so only the graph's entry is new
    assert (result["graphs_compiled"], result["graphs_loaded"]) == (None, None)  # the CPU has no device counters
    assert isinstance(result["first_call_s"], float) and result["first_call_s"] >= 0
    assert compiled == [{"backend": "my-backend", "dynamic": False}]


def test_main_needs_the_cache_folder(monkeypatch: pytest.MonkeyPatch, probe_model: str) -> None:
    monkeypatch.delenv(compile_probe.CACHE_ENV, raising=False)
    monkeypatch.setattr(torch, "compile", lambda model, **options: model)
    monkeypatch.setattr(sys, "argv", ["compile_probe", "--device", "cpu", "--backend", "b", "--model", probe_model])
    with pytest.raises(KeyError, match=compile_probe.CACHE_ENV):
        compile_probe.main()


def test_graph_counts_are_the_counters_difference_or_unknown() -> None:
    before, after = {"compiles": 2, "hits": 1}, {"compiles": 5, "hits": 1}
    assert compile_probe.graph_counts(before, after) == {"graphs_compiled": 3, "graphs_loaded": 0}
    assert compile_probe.graph_counts(None, after) == {"graphs_compiled": None, "graphs_loaded": None}
