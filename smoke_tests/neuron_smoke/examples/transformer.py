"""Tiny decoder-only transformers from transformers' configs, with seeded random weights (no hub access)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from neuron_smoke.errors import UsageError
from neuron_smoke.models import LossFn

VOCAB = 256
BATCH, SEQ = 2, 32
# The examples' tiny configs: 2 layers, width 64, 4 attention heads, dropout off.
MODELS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {
        "vocab_size": VOCAB, "n_positions": 128, "n_embd": 64, "n_layer": 2, "n_head": 4,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
    }),
    "llama": ("LlamaConfig", "LlamaForCausalLM", {
        "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128, "attention_dropout": 0.0,
    }),
}  # fmt: skip
Example = tuple[nn.Module, tuple[torch.Tensor, ...], LossFn]


def factory_for(name: str) -> Callable[..., Example]:
    """The factory of one of MODELS (what `--model neuron_smoke.examples.NAME:factory` calls). It takes the shape
    sweep's `shape` keyword (batch x sequence length), so each swept shape gets its own token batch and the
    causal-LM loss on it."""
    config_class, model_class, config = MODELS[name]

    def factory(shape: tuple[int, ...] | None = None) -> Example:
        return make(config_class, model_class, shape=shape, **config)

    return factory


def batch_shape(shape: tuple[int, ...] | None, longest: int | None) -> tuple[int, int]:
    """The token batch's (batch, length): the examples' own without `shape`; a usage error for a shape that is not
    batch x length, or longer than the model's positions."""
    if shape is None:
        return BATCH, SEQ
    if len(shape) != 2 or shape[0] < 1 or shape[1] < 2:
        raise UsageError(f"the example's inputs are batch x length token ids (a length of at least 2), not {shape}")
    if longest is not None and shape[1] > longest:
        raise UsageError(f"length {shape[1]} is longer than the example's {longest} positions")
    return int(shape[0]), int(shape[1])


def make(config_class: str, model_class: str, shape: tuple[int, ...] | None = None, **config: Any) -> Example:
    """transformers' `model_class` from `config_class(**config)` (eager attention), seeded, with a causal-LM batch
    (of `shape`, batch x length, when given)."""
    batch, length = batch_shape(shape, config.get("n_positions", config.get("max_position_embeddings")))
    try:
        transformers: Any = importlib.import_module("transformers")
    except ImportError as exc:
        raise UsageError(
            f"this example needs transformers (pip install 'neuron-torch[eval]' or transformers): {exc}"
        ) from exc
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    settings = getattr(transformers, config_class)(**config)
    settings._attn_implementation = "eager"
    model: nn.Module = getattr(transformers, model_class)(settings)
    model.train()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (batch, length), generator=gen)

    def loss_fn(output: Any) -> torch.Tensor:
        """Next-token cross entropy of the logits against the inputs shifted by one (the causal-LM loss)."""
        logits = output.logits if hasattr(output, "logits") else output[0]
        labels = ids.to(logits.device)
        return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))

    return model, (ids,), loss_fn
