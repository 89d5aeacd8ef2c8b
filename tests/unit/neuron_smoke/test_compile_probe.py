"""Unit tests of neuron_smoke.compile_probe: counting the compiled artifacts in the cache folder, and main's one
JSON line (a tiny --model on the CPU, with torch.compile stood in by a wrapper that writes an artifact the way a
cold compile does)."""

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

    def fake_compile(model: torch.nn.Module, **options: Any) -> Callable[..., torch.Tensor]:
        compiled.append(options)

        def call(*args: torch.Tensor) -> torch.Tensor:
            (cache / f"graph-{len(list(cache.iterdir()))}.neff").write_text("compiled")
            out: torch.Tensor = model(*args)
            return out

        return call

    monkeypatch.setattr(torch, "compile", fake_compile)
    argv = ["compile_probe", "--device", "cpu", "--backend", "my-backend", "--model", probe_model]
    monkeypatch.setattr(sys, "argv", argv)
    compile_probe.main()
    line = capsys.readouterr().out.strip()
    result = json.loads(line)
    assert (result["entries_before"], result["entries_after"]) == (1, 2)
    assert isinstance(result["first_call_s"], float) and result["first_call_s"] >= 0
    assert compiled == [{"backend": "my-backend", "dynamic": False}]


def test_main_needs_the_cache_folder(monkeypatch: pytest.MonkeyPatch, probe_model: str) -> None:
    monkeypatch.delenv(compile_probe.CACHE_ENV, raising=False)
    monkeypatch.setattr(torch, "compile", lambda model, **options: model)
    monkeypatch.setattr(sys, "argv", ["compile_probe", "--device", "cpu", "--backend", "b", "--model", probe_model])
    with pytest.raises(KeyError, match=compile_probe.CACHE_ENV):
        compile_probe.main()
