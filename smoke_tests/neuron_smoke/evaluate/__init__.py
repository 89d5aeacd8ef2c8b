"""Evaluate a team's own model for the move to TorchNeuron (verify-device --record / --baseline / --shapes).

record a baseline where the team runs today, compare on the device against it and a same-machine CPU run, per
tensor and per layer; scan the op inventory for what the release does not support; sweep input shapes through
torch.compile; write the JSON report and its Markdown and HTML renderings. See smoke_tests/README.md.
"""

SCHEMA = "neuron-eval/1"
BASELINE_SCHEMA = "neuron-eval-baseline/2"  # /2: a value kept under several names is stored once (`same_as`)
BASELINE_READS = ("neuron-eval-baseline/1", BASELINE_SCHEMA)  # the schemas --baseline reads
# --precision: how the device computes float32 (precision.py implements each; the release data names the default,
# and neuron_torch's matrix schema accepts these names only: tests/unit/neuron_smoke/evaluate/test_precision.py).
PRECISIONS = ("fp32", "bf16-matmul", "bf16-autocast")
