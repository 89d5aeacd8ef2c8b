"""transformers' GPT2LMHeadModel from a tiny config (2 layers, width 64, 4 heads, vocabulary 256), dropout off."""

from neuron_smoke.examples.transformer import factory_for

factory = factory_for("gpt2")
