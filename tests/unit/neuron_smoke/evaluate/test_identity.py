"""neuron_smoke.evaluate.identity: a model's fingerprint, and the refusal of a baseline from another model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from neuron_smoke import models
from neuron_smoke.errors import UsageError
from neuron_smoke.evaluate import identity
from neuron_smoke.models import ModelSpec, mean_square_loss


def _spec(model: nn.Module, *args: torch.Tensor, name: str = "m", **kwargs: torch.Tensor) -> ModelSpec:
    return ModelSpec(model, args, kwargs, mean_square_loss, name)


def _net(seed: int = 0, hidden: int = 3, dtype: torch.dtype = torch.float32) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, hidden), nn.BatchNorm1d(hidden), nn.Linear(hidden, 2)).to(dtype)


def test_the_fingerprint_describes_the_parameters_buffers_and_inputs() -> None:
    model = _net()
    x, mask = torch.zeros(5, 4), torch.ones(5, dtype=torch.bool)
    found = identity.fingerprint(_spec(model, x, name="net", mask=mask))
    assert (found["name"], found["class"]) == ("net", "torch.nn.modules.container.Sequential")
    expected = [[n, list(t.shape), str(t.dtype).removeprefix("torch.")] for n, t in model.named_parameters()]
    expected += [[n, list(t.shape), str(t.dtype).removeprefix("torch.")] for n, t in model.named_buffers()]
    assert found["structure"] == expected  # buffers too: BatchNorm's running statistics
    assert found["parameters"] == sum(p.numel() for p in model.parameters())
    assert found["inputs"] == [[[5, 4], "float32"], [[5], "bool"]]  # positional, then keyword
    again = identity.fingerprint(_spec(_net(), x.clone(), name="net", mask=mask.clone()))
    assert again == found  # the same values in fresh tensors: the same digests


def test_one_changed_weight_or_input_value_changes_its_digest() -> None:
    x = torch.zeros(5, 4)
    before = identity.fingerprint(_spec(_net(), x))
    model = _net()
    with torch.no_grad():
        model[2].bias[1] += 1e-6
    changed = identity.fingerprint(_spec(model, x))
    assert changed["state_sha256"] != before["state_sha256"] and changed["inputs_sha256"] == before["inputs_sha256"]
    y = x.clone()
    y[4, 3] = 1.0
    moved = identity.fingerprint(_spec(_net(), y))
    assert moved["inputs_sha256"] != before["inputs_sha256"] and moved["state_sha256"] == before["state_sha256"]


def test_the_same_model_and_inputs_pass_the_check() -> None:
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    identity.check(identity.fingerprint(_spec(_net(), x)), identity.fingerprint(_spec(_net(), x.clone())), "b")


def test_a_baseline_of_another_model_names_what_only_one_side_has() -> None:
    x = torch.zeros(5, 4)
    recorded = identity.fingerprint(_spec(_net(), x))
    # index 1 is a Linear (a weight and bias, as BatchNorm's, but no buffers), and a fourth layer
    other = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 3), nn.Linear(3, 2), nn.Linear(2, 2))
    current = identity.fingerprint(_spec(other, x, name="other"))
    with pytest.raises(UsageError) as exc:
        identity.check(recorded, current, "base/")
    message = str(exc.value)
    assert message.startswith("--baseline base/: recorded from a different model")
    assert f"{recorded['parameters']} parameters) than --model other (" in message
    assert "only in the baseline: 1.num_batches_tracked, 1.running_mean, 1.running_var" in message
    assert "only in the model: 3.bias, 3.weight" in message
    assert message.endswith("Record a baseline of this model with --record.")


@pytest.mark.parametrize(
    ("current", "detail"),
    [
        (_net(hidden=5), "0.weight is float32[5, 4] here, float32[3, 4] in the baseline"),
        (_net(dtype=torch.float64), "0.weight is float64[3, 4] here, float32[3, 4] in the baseline"),
    ],
)
def test_a_parameter_of_another_shape_or_dtype_is_named_with_both_sides(current: nn.Module, detail: str) -> None:
    recorded = identity.fingerprint(_spec(_net(), torch.zeros(5, 4)))
    with pytest.raises(UsageError, match=r"recorded from a different model") as exc:
        identity.check(recorded, identity.fingerprint(_spec(current, torch.zeros(5, 4))), "b")
    assert detail in str(exc.value)


def test_the_same_structure_in_another_class_is_refused() -> None:
    class Renamed(nn.Sequential):
        pass

    torch.manual_seed(0)
    layers = _net()
    recorded = identity.fingerprint(_spec(layers, torch.zeros(5, 4)))
    current = identity.fingerprint(_spec(Renamed(*layers), torch.zeros(5, 4)))
    assert current["structure"] == recorded["structure"] and current["state_sha256"] == recorded["state_sha256"]
    with pytest.raises(UsageError, match=r"different model .*: the model class differs\. Record"):
        identity.check(recorded, current, "b")


def test_a_model_without_inputs_is_described_as_none() -> None:
    recorded = identity.fingerprint(_spec(_net(), torch.zeros(5, 4)))
    current = identity.fingerprint(_spec(_net()))
    assert current["inputs"] == []
    with pytest.raises(UsageError, match=r"recorded with inputs float32\[5x4\], the factory gives none\."):
        identity.check(recorded, current, "b")


def batchnorm_factory() -> tuple[nn.Module, torch.Tensor]:
    return _net(), torch.randn(5, 4, generator=torch.Generator().manual_seed(3))


def test_a_loaded_model_is_fingerprinted_as_the_factory_made_it_before_any_forward() -> None:
    """Loading checks the model with one forward, which updates BatchNorm's running statistics (by amounts the CPU's
    kernels decide: AVX2 and AVX-512 differ). The fingerprint must be the factory's, before that forward."""
    loaded = models.load(f"{__name__}:batchnorm_factory")
    fresh, x = batchnorm_factory()
    assert identity.fingerprint(loaded) == identity.fingerprint(_spec(fresh, x, name=loaded.name))
    assert torch.equal(loaded.model.get_buffer("1.running_mean"), torch.zeros(3))
    assert int(loaded.model.get_buffer("1.num_batches_tracked")) == 0


def test_a_sparse_buffer_is_fingerprinted_by_its_values() -> None:
    model = nn.Linear(2, 2)
    model.register_buffer("mask", torch.eye(2).to_sparse())
    found = identity.fingerprint(_spec(model, torch.zeros(1, 2)))
    dense = nn.Linear(2, 2)
    dense.load_state_dict(model.state_dict(), strict=False)
    dense.register_buffer("mask", torch.eye(2))
    assert found["state_sha256"] == identity.fingerprint(_spec(dense, torch.zeros(1, 2)))["state_sha256"]
