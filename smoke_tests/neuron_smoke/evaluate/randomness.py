"""Random ops (dropout, bernoulli, rand, normal_, ...) drawn alike on every side of the comparison.

A device's random generator is not the CPU's (and a seed gives other numbers on each), so a healthy model with
dropout would differ between the device run, the same-machine CPU run and the baseline by the masks alone. In a step
whose stepmode.StepMode has a SameRandom drawer, every aten op tagged `nondeterministic_seeded` that draws numbers
runs on the CPU from one generator seeded with SEED, and its result moves to the op's device: each side then sees
the same masks, and the rest of the step (the masked values' use, forward and backward) still runs on the device.
The device's own random kernels are not compared; the report says which ops were drawn this way.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils import _pytree as pytree

from neuron_smoke.evaluate.inventory import op_name
from neuron_smoke.evaluate.stepmode import per_op, written_places

SEED = 0
SEEDED = torch.Tag.nondeterministic_seeded


_seeded = per_op(lambda func: SEEDED in func.tags)


def _draws(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the op draws random numbers here (dropout with p = 0 or train=False, or attention without dropout,
    is deterministic and stays on its device)."""
    if not _seeded(func):
        return False
    schema = func._schema
    values = {a.name: (args[i] if i < len(args) else kwargs.get(a.name, a.default_value))
              for i, a in enumerate(schema.arguments)}  # fmt: skip
    if "dropout_p" in values:
        return bool(values["dropout_p"])
    if schema.name == "aten::native_dropout":
        return bool(values["p"]) and values["train"] is not False
    return True


def _device_of(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.device:
    if kwargs.get("device") is not None:
        return torch.device(kwargs["device"])
    first = next((t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)), None)
    return first.device if first is not None else torch.device("cpu")


class SameRandom:
    """Draws random ops from one CPU generator seeded `seed` (a stepmode.Drawer); `calls` counts them per op."""

    def __init__(self, seed: int = SEED) -> None:
        self.state = torch.Generator().manual_seed(seed).get_state()
        self.calls: Counter[str] = Counter()

    draws = staticmethod(_draws)  # asked of every op: no call in between

    def run(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """The op drawn on the CPU from this generator's state, its results on the op's device."""
        self.calls[op_name(func)] += 1
        device = _device_of(func, args, kwargs)

        def host(x: Any) -> Any:
            return x.detach().to("cpu") if isinstance(x, torch.Tensor) else x

        cpu_args, cpu_kwargs = pytree.tree_map(host, (tuple(args), dict(kwargs)))
        if "device" in cpu_kwargs:
            cpu_kwargs["device"] = torch.device("cpu")
        if "generator" in cpu_kwargs:
            cpu_kwargs["generator"] = None  # the default CPU generator, set to this run's state below
        saved = torch.get_rng_state()
        torch.set_rng_state(self.state)
        try:
            out = func(*cpu_args, **cpu_kwargs)
        finally:
            self.state = torch.get_rng_state()
            torch.set_rng_state(saved)
        return self._results(func, args, kwargs, (cpu_args, cpu_kwargs), out, device)

    @staticmethod
    def _results(func: Any, args: Any, kwargs: Any, cpu: Any, out: Any, device: torch.device) -> Any:
        """Mutated arguments written back on their device; results moved there (an in-place op returns its self)."""
        mutated = None
        for i, name in written_places(func):
            original = args[i] if i < len(args) else kwargs.get(name)
            copy = cpu[0][i] if i < len(args) else cpu[1].get(name)
            if isinstance(original, torch.Tensor) and copy is not original:
                original.copy_(copy)
            mutated = original if mutated is None else mutated
        if mutated is not None and isinstance(out, torch.Tensor):
            return mutated
        return pytree.tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, out)
