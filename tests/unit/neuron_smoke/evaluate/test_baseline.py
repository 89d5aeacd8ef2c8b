"""neuron_smoke.evaluate.baseline: a baseline directory written whole (safetensors), read back, and refused when
it is not one."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest
import torch

from neuron_smoke.errors import UsageError
from neuron_smoke.evaluate import BASELINE_SCHEMA, baseline, tensors

pytest.importorskip("safetensors", reason="the baseline's default format needs the `eval` extra (safetensors)")

LIMIT = 100


def _values() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {
        "loss": torch.tensor(0.75),
        "grad/fc.weight": torch.randn(8, 8, generator=gen),  # 64 <= LIMIT: whole
        "weight/big": torch.randn(20, 10, generator=gen),  # 200 > LIMIT: a summary and its sketch
        "ids": torch.arange(LIMIT + 50),  # above the limit, but not comparable: whole
        "weight/fc.weight": torch.randn(16, 4, generator=gen).t(),  # not contiguous
    }


def test_a_baseline_round_trips_whole_tensors_and_sketches_of_large_ones(tmp_path: Path) -> None:
    values = _values()
    baseline.save(tmp_path / "b", {"model": {"name": "m"}, "order": ["fc"]}, values, limit=LIMIT)
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["index.json", "tensors.safetensors"]
    loaded = baseline.load(tmp_path / "b")
    index = loaded.index
    assert (index["schema"], index["format"], index["full_tensor_limit"]) == (BASELINE_SCHEMA, "safetensors", LIMIT)
    assert index["model"] == {"name": "m"} and index["order"] == ["fc"]  # the caller's entries are kept
    assert loaded.names == list(values)
    for name, t in values.items():
        if name == "weight/big":
            continue
        full = loaded.full(name)
        assert full is not None and torch.equal(full, t) and full.dtype == t.dtype, name
        assert index["tensors"][name] == {
            "shape": list(t.shape),
            "dtype": tensors.summary(t)["dtype"],
            "stored": "full",
        }
        assert loaded.sketch(name) is None
    big = values["weight/big"]
    assert loaded.full("weight/big") is None
    assert torch.equal(loaded.sketch("weight/big"), tensors.sketch(big))
    assert index["tensors"]["weight/big"] == {**tensors.summary(big), "stored": "sketch"}


@pytest.mark.parametrize("extra", [None, torch.bfloat16, torch.float64], ids=["float32", "bfloat16", "float64"])
def test_the_tensor_file_is_the_one_safetensors_torch_writer_makes(tmp_path: Path, extra: torch.dtype | None) -> None:
    import safetensors.torch as st

    values = {n: t.contiguous() for n, t in _values().items()}
    if extra is not None:
        values["act/x/out/0"] = torch.arange(6, dtype=extra).reshape(2, 3) / 7
    values["act/y/out/0"] = torch.zeros(0, 4)  # an empty tensor too
    baseline._save_safetensors(
        values | {"act/z/out/0": torch.arange(12.0).reshape(3, 4).t()}, tmp_path / "ours.safetensors"
    )
    values["act/z/out/0"] = torch.arange(12.0).reshape(3, 4).t().contiguous()  # a transposed one is written in order
    st.save_file(values, str(tmp_path / "torch.safetensors"), metadata={"schema": BASELINE_SCHEMA})
    assert (tmp_path / "ours.safetensors").read_bytes() == (tmp_path / "torch.safetensors").read_bytes()
    loaded = st.load_file(str(tmp_path / "ours.safetensors"))
    assert all(torch.equal(loaded[n], t) and loaded[n].dtype == t.dtype for n, t in values.items())


def test_recording_again_replaces_a_baseline_and_fills_an_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    baseline.save(tmp_path / "empty", {}, {"loss": torch.tensor(1.0)}, limit=LIMIT)
    assert baseline.load(tmp_path / "empty").names == ["loss"]
    baseline.save(tmp_path / "b", {}, {"loss": torch.tensor(1.0), "old": torch.zeros(2)}, limit=LIMIT)
    baseline.save(tmp_path / "b", {}, {"loss": torch.tensor(2.0)}, limit=LIMIT)
    again = baseline.load(tmp_path / "b")
    assert again.names == ["loss"] and float(again.full("loss")) == 2.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "empty"]  # no temporary directory left


def test_a_failed_write_leaves_the_old_baseline_and_no_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    baseline.save(tmp_path / "b", {}, {"loss": torch.tensor(1.0)}, limit=LIMIT)

    def broken(*_args: object, **_kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(baseline, "_save_safetensors", broken)
    with pytest.raises(OSError, match="disk full"):
        baseline.save(tmp_path / "b", {}, {"loss": torch.tensor(2.0)}, limit=LIMIT)
    assert float(baseline.load(tmp_path / "b").full("loss")) == 1.0
    assert [p.name for p in tmp_path.iterdir()] == ["b"]


def test_loading_refuses_a_directory_without_an_index(tmp_path: Path) -> None:
    with pytest.raises(
        UsageError, match=re.escape(f"--baseline {tmp_path}: no index.json there; record one with --record")
    ):
        baseline.load(tmp_path)


def test_loading_refuses_an_unreadable_index_or_another_schema(tmp_path: Path) -> None:
    (tmp_path / "index.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(UsageError, match=r"unreadable index\.json \(.+\); record the baseline again"):
        baseline.load(tmp_path)
    (tmp_path / "index.json").write_text(json.dumps({"schema": "neuron-eval-baseline/0"}), encoding="utf-8")
    expected = "expected 'neuron-eval-baseline/1' or 'neuron-eval-baseline/2'"
    with pytest.raises(UsageError, match=re.escape(f"schema 'neuron-eval-baseline/0', {expected}")):
        baseline.load(tmp_path)


def test_a_value_kept_under_several_names_is_stored_once_and_read_back_under_each(tmp_path: Path) -> None:
    values = _values()
    values["act/fc/out/0"] = values["act/head/in/0"] = values["grad/fc.weight"]  # one tensor object, three names
    values["act/big/out/0"] = values["weight/big"]  # a sketched one
    baseline.save(tmp_path / "b", {}, values, limit=LIMIT)
    loaded = baseline.load(tmp_path / "b")
    assert loaded.names == list(values)
    for alias in ("act/fc/out/0", "act/head/in/0"):
        assert loaded.index["tensors"][alias]["same_as"] == "grad/fc.weight"
        assert torch.equal(loaded.full(alias), values["grad/fc.weight"])
    assert loaded.index["tensors"]["act/big/out/0"] == {
        **loaded.index["tensors"]["weight/big"],
        "same_as": "weight/big",
    }
    assert torch.equal(loaded.sketch("act/big/out/0"), tensors.sketch(values["weight/big"]))
    import safetensors.torch as st

    stored = st.load_file(str(tmp_path / "b" / "tensors.safetensors"))
    assert sorted(stored) == sorted(["loss", "grad/fc.weight", "sketch:weight/big", "ids", "weight/fc.weight"])


def test_a_schema_1_baseline_is_read_and_a_same_as_naming_nothing_is_refused(tmp_path: Path) -> None:
    baseline.save(tmp_path / "b", {}, _values(), limit=LIMIT)
    index_file = tmp_path / "b" / "index.json"
    index = json.loads(index_file.read_text(encoding="utf-8"))
    index_file.write_text(json.dumps(index | {"schema": "neuron-eval-baseline/1"}), encoding="utf-8")
    assert torch.equal(baseline.load(tmp_path / "b").full("loss"), torch.tensor(0.75))  # /1: no same_as anywhere
    index["tensors"]["loss"]["same_as"] = "grad/nothing"
    index_file.write_text(json.dumps(index), encoding="utf-8")
    with pytest.raises(UsageError, match=r"cannot read its tensors \(KeyError: 'grad/nothing'\); record it again"):
        baseline.load(tmp_path / "b")


def test_a_safetensors_baseline_without_safetensors_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    baseline.save(tmp_path / "b", {}, {"loss": torch.tensor(1.0)}, limit=LIMIT)
    monkeypatch.setattr(baseline, "st", None)
    with pytest.raises(
        UsageError, match="stored with safetensors, which is not installed here; pip install safetensors"
    ):
        baseline.load(tmp_path / "b")


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_a_baseline_is_written_with_the_users_umask(tmp_path: Path, mask: int) -> None:
    """A team hands a baseline to a colleague: its folder and files follow the umask (mkdtemp alone gives 0700)."""
    old = os.umask(mask)
    try:
        baseline.save(tmp_path / "b", {"model": {"name": "m"}}, _values(), limit=LIMIT)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "b").stat().st_mode) == 0o777 & ~mask
    for f in (tmp_path / "b").iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~mask, f.name
