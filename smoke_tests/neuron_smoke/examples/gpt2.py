"""transformers' GPT2LMHeadModel from a tiny config (2 layers, width 64, 4 heads, vocabulary 256), dropout off."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from neuron_smoke.examples.transformer import VOCAB, make
from neuron_smoke.models import LossFn


def _build(transformers: Any) -> nn.Module:
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=128, n_embd=64, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    config._attn_implementation = "eager"
    model: nn.Module = transformers.GPT2LMHeadModel(config)
    return model


def factory() -> tuple[nn.Module, tuple[torch.Tensor, ...], LossFn]:
    return make(_build)
