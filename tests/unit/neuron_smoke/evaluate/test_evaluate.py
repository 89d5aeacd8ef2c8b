"""The evaluation's parts in-process: identity checks, sketches, origins, readiness, shape sweep, buckets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from neuron_smoke.errors import UsageError
from neuron_smoke.evaluate import baseline, compare, identity, inventory, readiness, shapes, sweep, tensors
from neuron_smoke.examples import mlp
from neuron_smoke.models import ModelSpec


def _spec(seed: int = 0, batch: int = 16) -> ModelSpec:
    model, inputs, loss_fn = mlp.factory()
    if seed:
        torch.manual_seed(seed)
        model = mlp.MLP()
    if batch != 16:
        inputs = (torch.randn(batch, 32, generator=torch.Generator().manual_seed(1)),)
    return ModelSpec(model, tuple(inputs), {}, loss_fn, "mlp")


def test_identity_refuses_other_inputs_and_unseeded_factories() -> None:
    recorded = identity.fingerprint(_spec())
    identity.check(recorded, identity.fingerprint(_spec()), "b")  # the same factory twice: accepted
    with pytest.raises(UsageError, match=r"recorded with inputs float32\[16x32\], the factory gives float32\[8x32\]"):
        identity.check(recorded, identity.fingerprint(_spec(batch=8)), "b")
    with pytest.raises(UsageError, match="the factory is not seeded"):
        identity.check(recorded, identity.fingerprint(_spec(seed=5)), "b")
    shifted = _spec()
    shifted.args = (shifted.args[0] + 1,)
    with pytest.raises(UsageError, match="input values differ"):
        identity.check(recorded, identity.fingerprint(shifted), "b")


def test_sketch_sees_an_error_in_one_element_of_a_large_tensor() -> None:
    x = torch.randn(300_000, generator=torch.Generator().manual_seed(0))
    y = x.clone()
    assert tensors.normwise(tensors.sketch(y), tensors.sketch(x)) == 0.0
    y[123_456] += 50.0  # one element; a sampled projection would almost surely miss it
    assert tensors.normwise(tensors.sketch(y), tensors.sketch(x)) > 0.05
    assert tensors.normwise(torch.tensor([float("nan")]), torch.tensor([1.0])) == float("inf")


def _row(name: str, err: float) -> dict[str, Any]:
    return {"tensor": name, "vs_cpu": err, "vs_baseline": None}


def test_origins_name_the_innermost_layer_where_inputs_agree_and_outputs_do_not() -> None:
    rows = [
        _row("act/block/in/0", 0.0), _row("act/block/out/0", 0.3),
        _row("act/block.a/in/0", 0.0), _row("act/block.a/out/0", 0.0),
        _row("act/block.b/in/0", 0.0), _row("act/block.b/out/0", 0.2),
        _row("act/head/in/0", 0.3), _row("act/head/out/0", 0.4),
        _row("act/norm/in/0", 8e-4), _row("act/norm/out/0", 1.2e-3),  # an inherited error lifted over rtol
    ]  # fmt: skip
    found = compare.origins(rows, ["block.a", "block.b", "block", "head", "norm"], "cpu", 1e-3)
    assert [o["layer"] for o in found] == ["block.b"]


class Odd(nn.Module):
    """Uses what the release does not support: fft, a float64 buffer, a sparse tensor and a func transform."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.register_buffer("scale", torch.ones(8, dtype=torch.float64))
        self.spectral = Spectral()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.spectral(self.proj(x)) * self.scale.float()
        sparse = torch.eye(8).to_sparse()
        y = y + torch.sparse.mm(sparse, y.t()).t()
        return torch.func.vmap(torch.sin)(y)


class Spectral(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.irfft(torch.fft.rfft(x), n=x.shape[-1])


def test_readiness_names_each_unsupported_area_with_its_module() -> None:
    model = Odd()
    with inventory.recording(model) as inv:
        model(torch.randn(4, 8)).sum().backward()
    found = readiness.scan(model, inv, None, None)
    areas = {(u["area"], u["module"]) for u in found["unsupported"]}
    assert {("fft", "spectral"), ("sparse", "(root)"), ("func", "(root)")} <= areas
    assert not any(u["module"] == "proj" for u in found["unsupported"])
    assert {"what": "buffer", "name": "scale", "module": "(root)"} in found["float64"]
    assert found["fallback_tracked"] is False and found["compile_failure"] is None


def test_compile_failure_names_the_op_and_its_module() -> None:
    inv = inventory.Inventory([inventory.OpRecord("aten::_fft_r2c.default", "spectral", "forward", 1)])
    failure = readiness.compile_failure(RuntimeError("no lowering for aten::_fft_r2c\nmore"), inv)
    assert failure == {"error": "RuntimeError: no lowering for aten::_fft_r2c", "ops": {
        "aten::_fft_r2c.default": ["spectral"]}}  # fmt: skip


class FakeDeviceModule:
    """A device module whose compile cache reports its compiles (the interface sweep reads): here Dynamo's count
    of graphs compiled, which a device compiles one for one."""

    def compile_cache_stats(self) -> dict[str, int]:
        from torch._dynamo.utils import counters

        return {"compiles": counters["stats"]["unique_graphs"]}


def test_sweep_counts_one_compile_per_new_shape_and_none_for_a_repeat() -> None:
    from torch._dynamo.utils import counters

    counters.clear()
    spec = _spec()
    shapes = [(4, 32), (8, 32), (4, 32), (12, 32)]
    result, error = sweep.run(
        spec.model, (spec.args, spec.kwargs), shapes, "cpu", "aot_eager", 2, lambda: None, FakeDeviceModule()
    )
    assert error is None and result["failed_at"] is None
    assert [r["compiled_graphs"] for r in result["shapes"]] == [1, 1, 0, 1]
    assert result["compiles"] == 3 == counters["stats"]["unique_graphs"]  # Dynamo's own count agrees
    assert result["recompiles"] == 2 and result["distinct_shapes"] == 3
    assert (result["device_compiles"], result["device_cache_hits"], result["device_recompiles"]) == (3, 0, 2)
    assert "3 compile(s), 0 cache hit(s), 2 recompile(s) (agrees)" in sweep.cache_note(result)
    assert result["buckets"]["boundaries"] == {"0": [4, 8, 16]}
    assert all(r["first_call_s"] > r["steady_p50_ms"] / 1e3 for r in result["shapes"] if r["compiled_graphs"])


def test_sweep_without_a_device_cache_count_says_so() -> None:
    spec = _spec()
    result, error = sweep.run(
        spec.model, (spec.args, spec.kwargs), [(4, 32)], "cpu", "aot_eager", 1, lambda: None, object()
    )
    assert error is None and result["compiles"] == 1 and result["device_compiles"] is None
    assert "not reported (no compile_cache_stats() on the device module" in sweep.cache_note(result)
    assert "DIFFERS from Dynamo's 2" in sweep.cache_note({**result, "compiles": 2, "device_compiles": 1,
                                                           "device_cache_hits": 0, "device_recompiles": 0})  # fmt: skip


def test_buckets_say_when_padding_saves_compiles() -> None:
    found = sweep.suggest_buckets([(1, 128), (8, 128), (8, 512), (8, 300), (8, 500)])
    assert found["boundaries"] == {"0": [1, 8], "1": [128, 512]}
    assert (found["compiles_now"], found["compiles_bucketed"]) == (5, 3)
    assert "would compile 3 graph(s) instead of 5" in found["note"]


@pytest.mark.parametrize(
    ("text", "message"),
    [("8x", "not a shape"), ("8x0", "<= 0"), (",", "at least one shape")],
)
def test_bad_shapes_are_usage_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        shapes.parse_shapes(text)


def test_a_shape_of_the_wrong_rank_is_refused() -> None:
    with pytest.raises(UsageError, match="has 3 dimensions, the model's first input 16x32 has 2"):
        sweep.inputs_for((_spec().args, {}), (1, 2, 3), seed=0)


def test_the_sweep_resizes_a_keyword_input_and_keeps_the_others() -> None:
    mask = torch.ones(2, 5)
    args, kwargs = sweep.inputs_for(((), {"ids": torch.arange(10).reshape(2, 5), "mask": mask}), (3, 7), seed=0)
    assert args == () and kwargs["ids"].shape == (3, 7) and kwargs["ids"].dtype == torch.int64
    assert int(kwargs["ids"].min()) >= 0 and int(kwargs["ids"].max()) <= 9 and kwargs["mask"] is mask


def test_without_safetensors_a_baseline_round_trips_through_torch_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(baseline, "st", None)
    values = {"weight/big": torch.randn(40, 30), "loss": torch.tensor(1.5), "ids": torch.arange(5)}
    baseline.save(tmp_path / "b", {"note": "x"}, values, limit=1000)
    loaded = baseline.load(tmp_path / "b")
    assert loaded.index["format"] == "torch.save" and (tmp_path / "b" / "tensors.pt").is_file()
    assert loaded.index["tensors"]["weight/big"]["stored"] == "sketch"  # 1200 elements > 1000
    assert torch.equal(loaded.sketch("weight/big"), tensors.sketch(values["weight/big"]))
    assert torch.equal(loaded.full("ids"), values["ids"]) and loaded.full("weight/big") is None
    assert [p.name for p in tmp_path.iterdir()] == ["b"]  # no temporary directory left behind


def test_record_refuses_to_replace_a_directory_that_is_not_a_baseline(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(UsageError, match="exists and is not a baseline directory"):
        baseline.save(tmp_path / "mine", {}, {"loss": torch.tensor(1.0)}, limit=10)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
