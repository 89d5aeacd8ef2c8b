"""neuron_smoke.examples.transformer: building a transformers model from a config (eager attention, seeded, in
training mode) and its causal-LM batch and loss, checked against a stand-in transformers module; and the usage error
when transformers is not installed."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
import torch
from torch import nn

from neuron_smoke.errors import UsageError
from neuron_smoke.evaluate import sweep
from neuron_smoke.examples import transformer


class FakeConfig:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self._attn_implementation = "sdpa"


class FakeLM(nn.Module):
    """Returns what its `logits` attribute is set to (or random logits), wrapped as transformers' outputs are."""

    def __init__(self, config: FakeConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(transformer.VOCAB, 4)
        self.attn_at_build = config._attn_implementation
        self.eval()  # make() must put the model in training mode
        self.logits: torch.Tensor | None = None
        self.as_tuple = False

    def forward(self, ids: torch.Tensor) -> Any:
        logits = self.logits if self.logits is not None else self.embed(ids) @ torch.ones(4, transformer.VOCAB)
        return (logits,) if self.as_tuple else types.SimpleNamespace(logits=logits)


@pytest.fixture
def fake_transformers(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType("transformers")
    quiet: list[bool] = []
    module.logging = types.SimpleNamespace(set_verbosity_error=lambda: quiet.append(True))  # type: ignore[attr-defined]
    module.quiet = quiet  # type: ignore[attr-defined]
    for config_class, model_class, _ in transformer.MODELS.values():
        setattr(module, config_class, FakeConfig)
        setattr(module, model_class, FakeLM)
    monkeypatch.setitem(sys.modules, "transformers", module)
    return module


@pytest.mark.parametrize("name", sorted(transformer.MODELS))
def test_each_factory_builds_its_model_from_its_tiny_config(name: str, fake_transformers: types.ModuleType) -> None:
    model, (ids,), _ = transformer.factory_for(name)()
    assert isinstance(model, FakeLM) and model.config.kwargs == transformer.MODELS[name][2]
    assert model.config._attn_implementation == "eager" and model.training
    assert fake_transformers.quiet == [True]  # transformers' warnings are silenced
    assert ids.shape == (transformer.BATCH, transformer.SEQ) and ids.dtype == torch.int64
    assert int(ids.min()) >= 0 and int(ids.max()) < transformer.VOCAB


def test_the_model_and_batch_are_seeded(fake_transformers: types.ModuleType) -> None:
    first, (ids,), _ = transformer.make("GPT2Config", "GPT2LMHeadModel", n_layer=1)
    torch.manual_seed(123)
    second, (ids2,), _ = transformer.make("GPT2Config", "GPT2LMHeadModel", n_layer=1)
    assert torch.equal(ids, ids2) and torch.equal(first.embed.weight, second.embed.weight)
    torch.manual_seed(0)
    assert torch.equal(first.embed.weight, nn.Embedding(transformer.VOCAB, 4).weight)  # built right after seed 0


def test_the_loss_predicts_each_next_token(fake_transformers: types.ModuleType) -> None:
    model, (ids,), loss_fn = transformer.make("LlamaConfig", "LlamaForCausalLM")
    nxt = torch.roll(ids, -1, dims=1)  # position t predicts token t + 1 (the last position is not scored)
    model.logits = nn.functional.one_hot(nxt, transformer.VOCAB).float() * 100
    assert float(loss_fn(model(ids))) < 1e-6
    model.as_tuple = True  # outputs without .logits: the first item
    assert float(loss_fn(model(ids))) < 1e-6
    model.logits = nn.functional.one_hot(ids, transformer.VOCAB).float() * 100  # the current token: wrong
    assert float(loss_fn(model(ids))) > 10
    model.logits = torch.zeros(transformer.BATCH, transformer.SEQ, transformer.VOCAB)
    assert float(loss_fn(model(ids))) == pytest.approx(torch.log(torch.tensor(float(transformer.VOCAB))).item())


@pytest.mark.parametrize("name", sorted(transformer.MODELS))
def test_the_factory_makes_the_batch_of_a_swept_shape_and_its_loss(
    name: str, fake_transformers: types.ModuleType
) -> None:
    _, (ids,), loss_fn = transformer.factory_for(name)(shape=(3, 12))
    assert ids.shape == (3, 12) and int(ids.max()) < transformer.VOCAB
    logits = nn.functional.one_hot(torch.roll(ids, -1, dims=1), transformer.VOCAB).float() * 100
    assert float(loss_fn(types.SimpleNamespace(logits=logits))) < 1e-6  # the loss is on this batch, not the default
    assert sweep.takes_shape(transformer.factory_for(name))


BAD_SHAPES = [((4,), "batch x length"), ((2, 3, 4), "batch x length"), ((2, 1), "at least 2"), ((2, 4096), "longer")]


@pytest.mark.parametrize(("shape", "message"), BAD_SHAPES)
def test_a_shape_the_example_cannot_take_is_a_usage_error(
    shape: tuple[int, ...], message: str, fake_transformers: types.ModuleType
) -> None:
    with pytest.raises(UsageError, match=message):
        transformer.factory_for("gpt2")(shape=shape)


def test_without_transformers_the_example_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(UsageError, match=r"this example needs transformers \(pip install 'neuron-torch\[eval\]'"):
        transformer.factory_for("gpt2")()


def test_an_unknown_example_name_is_refused() -> None:
    with pytest.raises(KeyError, match="bert"):
        transformer.factory_for("bert")
