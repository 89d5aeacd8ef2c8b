"""The `neuron` process-group backend of the simulated device: gloo over CPU copies of the device tensors."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future
from torch.futures import Future


class SimNeuronProcessGroup(dist.ProcessGroup):
    def __init__(self, store: Any, rank: int, world_size: int, timeout: timedelta) -> None:
        super().__init__(rank, world_size)
        self._gloo = dist.ProcessGroupGloo(store, rank, world_size, timeout)

    def allreduce(self, tensor_list: list[torch.Tensor], opts: Any = None) -> Any:
        host = [t.cpu() for t in tensor_list]
        self._gloo.allreduce(host, opts or dist.AllreduceOptions()).wait()
        for device_tensor, host_tensor in zip(tensor_list, host, strict=True):
            device_tensor.copy_(host_tensor)
        return _done(tensor_list)

    def barrier(self, opts: Any = None) -> Any:
        self._gloo.barrier().wait()
        return _done(None)

    def getBackendName(self) -> str:
        return "neuron"


def _done(value: Any) -> Any:
    future: Future[Any] = Future()
    future.set_result(value)
    return _create_work_from_future(future)


def _create(store: Any, rank: int, world_size: int, timeout: timedelta) -> SimNeuronProcessGroup:
    return SimNeuronProcessGroup(store, rank, world_size, timeout)


def register() -> None:
    if dist.is_available() and "neuron" not in dist.Backend.backend_list:
        dist.Backend.register_backend("neuron", _create, devices=["neuron"])
