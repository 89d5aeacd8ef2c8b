"""Where an error starts, forward and backward: a 1 % fault in one layer is named at that layer and no other.

In process, on the CPU (the simulated device's end-to-end case, through verify-device, is in test_evaluate.py): each
model's step with the fault, captured and compared against the same factory's step without it, as the evaluation
compares a device run against the CPU. A forward fault scales the layer's output; a backward fault leaves the output
right and scales the gradient the layer's backward is given, so what it passes on (to its inputs, its weights) is
wrong. The fault is always 1 %, far above the float32 bound and far under a blow-up.
"""

from __future__ import annotations

import functools

import pytest

from neuron_smoke import models
from neuron_smoke.evaluate import capture, compare, precision
from tests.integration.smoke import eval_faults

# model -> (factory, the layer the fault is put in): the built-in examples and the test models a team could bring
CASES = {
    "mlp": ("neuron_smoke.examples.mlp:factory", "fc2"),
    "resnet": ("neuron_smoke.examples.resnet:factory", "layer3.0.conv2"),
    "gpt2": ("neuron_smoke.examples.gpt2:factory", "transformer.h.1.mlp.c_proj"),
    "llama": ("neuron_smoke.examples.llama:factory", "model.layers.1.mlp.down_proj"),
    "dropout": (f"{eval_faults.__name__}:dropout", "fc1"),  # fc1's input is data: its weights' gradients say it
    "batchnorm": (f"{eval_faults.__name__}:batchnorm", "1"),
}


def _spec(name: str) -> models.ModelSpec:
    if name in ("gpt2", "llama"):
        pytest.importorskip("transformers", reason="the transformer examples need the `eval` extra (transformers)")
    return models.load(CASES[name][0])


@functools.cache
def _reference(name: str) -> capture.Capture:
    """The healthy step, once per model for both phases."""
    return capture.train_step(_spec(name), "cpu", at="fp32")


@pytest.mark.parametrize("phase", eval_faults.PHASES)
@pytest.mark.parametrize("name", list(CASES))
def test_a_fault_in_one_layer_is_located_there_and_nowhere_else(name: str, phase: str) -> None:
    layer = CASES[name][1]
    reference = _reference(name)
    spec = _spec(name)
    eval_faults.inject(spec.model, layer, 1.01, phase, device="cpu")
    faulty = capture.train_step(spec, "cpu", at="fp32")
    rtol = precision.bound("fp32", spec.model)
    rows = compare.per_tensor(faulty, reference, None, rtol)
    outputs = compare.origins(rows, faulty.order, "cpu", rtol)
    grads = compare.grad_origins(rows, faulty.order, "cpu", rtol)
    located, other = (outputs, grads) if phase == "forward" else (grads, outputs)
    assert [o["layer"] for o in located] == [layer], (located, other)
    assert located[0]["input_error"] <= rtol and located[0]["output_error"] == pytest.approx(0.01, rel=0.05)
    assert other == []  # a forward fault is not named again in backward; a backward one leaves forward right
    assert not all(r["ok"] for r in rows)
