"""Example factories for `verify-device --model`, built from configs with seeded random weights (no downloads).

| factory | model | needs |
|---|---|---|
| `neuron_smoke.examples.mlp:factory` | a small MLP classifier | torch |
| `neuron_smoke.examples.resnet:factory` | ResNet-18 (torchvision's when importable, else resnet.py's own) | torch |
| `neuron_smoke.examples.gpt2:factory` | transformers' GPT2LMHeadModel, tiny config | the `eval` extra |
| `neuron_smoke.examples.llama:factory` | transformers' LlamaForCausalLM, tiny config | the `eval` extra |
"""
