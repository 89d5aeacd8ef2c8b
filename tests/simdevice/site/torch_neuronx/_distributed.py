"""The `neuron` process-group backend of the simulated device: gloo over CPU copies of the device tensors.

Collectives return at once with a work that runs beside the host, as a device's do: `wait(timeout)` waits for gloo's
work (at most that long, raising "timed out" or the collective's error, as gloo's and nccl's works do) and then copies
the results back to the device tensors; `is_completed()` is gloo's; `abort()` aborts the gloo group beneath."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllgatherOptions, _create_work_from_future
from torch.futures import Future


class SimNeuronProcessGroup(dist.ProcessGroup):
    def __init__(self, store: Any, rank: int, world_size: int, timeout: timedelta) -> None:
        super().__init__(rank, world_size)
        self._gloo = dist.ProcessGroupGloo(store, rank, world_size, timeout)

    def allreduce(self, tensor_list: list[torch.Tensor], opts: Any = None) -> Any:
        host = [t.cpu() for t in tensor_list]
        work = self._gloo.allreduce(host, opts or dist.AllreduceOptions())
        return _DeviceWork(work, tensor_list, host)

    def allgather(
        self, output_lists: list[list[torch.Tensor]], input_list: list[torch.Tensor], opts: Any = None
    ) -> Any:
        host_out = [[t.cpu() for t in outputs] for outputs in output_lists]
        work = self._gloo.allgather(host_out, [t.cpu() for t in input_list], opts or AllgatherOptions())
        return _DeviceWork(work, [t for out in output_lists for t in out], [t for out in host_out for t in out])

    def barrier(self, opts: Any = None) -> Any:
        self._gloo.barrier().wait()
        return _done(None)

    def abort(self) -> None:
        self._gloo.abort()

    def getBackendName(self) -> str:
        return "neuron"


class _DeviceWork(dist.Work):
    """gloo's work on the host copies of DEVICE; once it has completed, the copies go back to the device tensors."""

    def __init__(self, work: Any, device: list[torch.Tensor], host: list[torch.Tensor]) -> None:
        super().__init__()
        self._work, self._device, self._host, self._copied = work, device, host, False

    def is_completed(self) -> bool:
        return bool(self._work.is_completed())

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        self._work.wait(timeout)  # (0: no timeout, as c10d's works take it)
        if not self._copied:
            for device_tensor, host_tensor in zip(self._device, self._host, strict=True):
                device_tensor.copy_(host_tensor)
            self._copied = True
        return True


def _done(value: Any) -> Any:
    future: Future[Any] = Future()
    future.set_result(value)
    return _create_work_from_future(future)


def _create(store: Any, rank: int, world_size: int, timeout: timedelta) -> SimNeuronProcessGroup:
    return SimNeuronProcessGroup(store, rank, world_size, timeout)


def register() -> None:
    if dist.is_available() and "neuron" not in dist.Backend.backend_list:
        dist.Backend.register_backend("neuron", _create, devices=["neuron"])
