"""transformers' LlamaForCausalLM from a tiny config (2 layers, width 64, 4 heads / 2 KV heads, vocabulary 256)."""

from neuron_smoke.examples.transformer import factory_for

factory = factory_for("llama")
