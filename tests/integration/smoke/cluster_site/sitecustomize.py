"""Fault injection for the multi-node tests (tests only): on PYTHONPATH of one node's verify-device, Python imports
this at start-up, and `NEURON_CLUSTER_INJECT=name[,name...]` patches torch for that node alone. No product code
reads the variable; nothing is patched when it is unset (torch is not even imported here then).

| injector         | what the node then does                                                                  |
|------------------|------------------------------------------------------------------------------------------|
| wrong_value      | adds 100 to what it sends in every gloo all_reduce and all_gather (its contribution)      |
| die_in_allreduce | SIGKILLs itself at its first gloo all_reduce (a node lost in the middle of a collective) |
| hang_in_allreduce | SIGSTOPs itself at its first gloo all_reduce: stuck, its sockets open (a frozen node)    |
| die_in_group     | SIGKILLs itself as it builds its gloo process group, the others connecting to it         |
| other_graph      | `F.gelu` computes the tanh approximation whatever it is asked (another lowering)          |
"""

from __future__ import annotations

import os
import signal
from typing import Any

INJECTORS = ("wrong_value", "die_in_allreduce", "hang_in_allreduce", "die_in_group", "other_graph")


def _install() -> None:
    names = {n.strip() for n in os.environ.get("NEURON_CLUSTER_INJECT", "").split(",") if n.strip()}
    unknown = names - set(INJECTORS)
    if unknown:
        raise ValueError(f"unknown NEURON_CLUSTER_INJECT value(s): {sorted(unknown)}; known: {', '.join(INJECTORS)}")
    if not names:
        return
    import torch
    import torch.distributed as dist

    gloo: Any = dist.ProcessGroupGloo
    allreduce, allgather = gloo.allreduce, gloo.allgather
    if "wrong_value" in names:

        def wrong_allreduce(self: Any, tensors: list[torch.Tensor], *args: Any) -> Any:
            tensors[0].add_(100)
            return allreduce(self, tensors, *args)

        def wrong_allgather(self: Any, outputs: Any, inputs: list[torch.Tensor], *args: Any) -> Any:
            inputs[0].add_(100)
            return allgather(self, outputs, inputs, *args)

        gloo.allreduce, gloo.allgather = wrong_allreduce, wrong_allgather
    if "die_in_allreduce" in names:

        def die(self: Any, tensors: list[torch.Tensor], *args: Any) -> Any:
            os.kill(os.getpid(), signal.SIGKILL)

        gloo.allreduce = die
    if "hang_in_allreduce" in names:

        def hang(self: Any, tensors: list[torch.Tensor], *args: Any) -> Any:
            os.kill(os.getpid(), signal.SIGSTOP)

        gloo.allreduce = hang
    if "die_in_group" in names:

        class Dying(gloo):  # type: ignore[misc]
            def __init__(self, *args: Any) -> None:
                os.kill(os.getpid(), signal.SIGKILL)

        dist.ProcessGroupGloo = Dying  # type: ignore[misc]
    if "other_graph" in names:
        gelu = torch.nn.functional.gelu

        def tanh_gelu(input: torch.Tensor, approximate: str = "none") -> torch.Tensor:
            return gelu(input, approximate="tanh")

        torch.nn.functional.gelu = tanh_gelu


_install()
