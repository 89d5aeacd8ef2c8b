"""The evaluation's parts in-process: identity checks, sketches, origins, readiness, shape parsing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from neuron_smoke.errors import UsageError
from neuron_smoke.evaluate import baseline, compare, identity, inventory, readiness, shapes, tensors
from neuron_smoke.examples import mlp
from neuron_smoke.models import ModelSpec
from neuron_smoke.numerics import normwise_error


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
    assert normwise_error(tensors.sketch(y), tensors.sketch(x)) == 0.0
    y[123_456] += 50.0  # one element; a sampled projection would almost surely miss it
    assert normwise_error(tensors.sketch(y), tensors.sketch(x)) > 0.05
    assert normwise_error(torch.tensor([float("nan")]), torch.tensor([1.0])) == float("inf")


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


@pytest.mark.parametrize(
    ("text", "message"),
    [("8x", "not a shape"), ("8x0", "<= 0"), (",", "at least one shape")],
)
def test_bad_shapes_are_usage_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        shapes.parse_shapes(text)


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
