"""The `neuron` torch.compile backend of the simulated device: Dynamo and AOT Autograd, then eager kernels."""

from __future__ import annotations

from typing import Any


def neuron_backend(gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
    # Found by Dynamo through the `torch_dynamo_backends` entry point, so importing torch_neuronx stays cheap.
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    def compiler(graph: Any, _inputs: Any) -> Any:
        return make_boxed_func(graph.forward)

    return aot_autograd(fw_compiler=compiler, bw_compiler=compiler)(gm, example_inputs, **kwargs)


def register() -> None:
    """Nothing to do eagerly: the entry point in torch_neuronx's dist-info registers the backend."""
