"""Tiny decoder-only transformers from transformers' configs, with seeded random weights (no hub access)."""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch import nn

from neuron_smoke.errors import UsageError
from neuron_smoke.models import LossFn

VOCAB = 256
BATCH, SEQ = 2, 32


def make(build: Any) -> tuple[nn.Module, tuple[torch.Tensor, ...], LossFn]:
    try:
        transformers: Any = importlib.import_module("transformers")
    except ImportError as exc:
        raise UsageError(
            f"this example needs transformers (pip install 'neuron-torch[eval]' or transformers): {exc}"
        ) from exc
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = build(transformers)
    model.train()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)

    def loss_fn(output: Any) -> torch.Tensor:
        """Next-token cross entropy of the logits against the inputs shifted by one (the causal-LM loss)."""
        logits = output.logits if hasattr(output, "logits") else output[0]
        labels = ids.to(logits.device)
        return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))

    return model, (ids,), loss_fn
