"""One rank of the collectives stage: all_reduce(rank + 1) over the backend's process group.

Started by torchrun (`python -m neuron_smoke.collective_worker ...`) or forked by the fork launcher (`run_rank`); either
way the rank, world size and rendezvous address come from torchrun's environment variables.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path


def _own_core_before_torch() -> None:
    """A torchrun worker (`-m neuron_smoke.collective_worker ... --cores 0,1`) takes its NeuronCore before `import
    torch`, which may import torch_neuronx (device-backend autoload); the fork launcher's ranks do it in run_rank."""
    if __name__ == "__main__" and "--cores" in sys.argv and "LOCAL_RANK" in os.environ:
        cores = sys.argv[sys.argv.index("--cores") + 1].split(",")
        os.environ["NEURON_RT_VISIBLE_CORES"] = cores[int(os.environ["LOCAL_RANK"])]
        os.environ.pop("NEURON_RT_NUM_CORES", None)


_own_core_before_torch()

import torch  # noqa: E402  (after the worker took its core)
import torch.distributed as dist  # noqa: E402

from neuron_smoke.backends import BACKENDS  # noqa: E402


def run_rank(
    device_name: str,
    process_group: str,
    timeout_s: float,
    result_dir: Path,
    cores: tuple[int, ...] = (),
    give_up_at: float | None = None,
) -> None:
    """`timeout_s` bounds the rendezvous and the collective; `give_up_at` (epoch seconds), when given, shortens it so
    that a rank that started late still gives up, and says so, before its launcher's deadline."""
    backend = BACKENDS[device_name]
    torch.set_num_threads(1)
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    index = local
    if cores:
        # This rank's own NeuronCore, set before the runtime starts (NeuronCores belong to one process); it is then
        # the only device this process sees.
        os.environ["NEURON_RT_VISIBLE_CORES"] = str(cores[local])
        os.environ.pop("NEURON_RT_NUM_CORES", None)
        index = 0
    backend.import_module()
    device = torch.device("cpu") if backend.device_type == "cpu" else torch.device(backend.device_type, index)
    if backend.device_type != "cpu":
        torch.accelerator.set_device_index(index)
    if give_up_at is not None:
        timeout_s = max(1.0, min(timeout_s, give_up_at - time.time()))
    phase = "init_process_group"
    try:
        dist.init_process_group(
            backend=process_group,
            init_method="env://",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=timeout_s),
        )
        phase = "all_reduce"
        value = torch.tensor([float(rank + 1)], device=device)
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        # One file per rank: the ranks' stdout interleaves, so printed results can be garbled.
        _record(result_dir, rank, world_size=world, value=value.cpu().item())
    except Exception as exc:
        # A rank that gives up (its collective timed out waiting for a peer) says so; a rank that hangs or dies
        # writes nothing, and the stage names it as the one that did not answer.
        _record(result_dir, rank, world_size=world, phase=phase, error=f"{type(exc).__name__}: {exc}"[:500])
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _record(result_dir: Path, rank: int, **fields: object) -> None:
    path = result_dir / f"rank-{rank}.json"
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps({"rank": rank, **fields}))
    partial.replace(path)  # whole or absent, never half-written


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", required=True, choices=sorted(BACKENDS))
    parser.add_argument("--process-group", required=True)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--give-up-at", type=float, default=None, help="epoch seconds by which to give up waiting")
    parser.add_argument("--result-dir", required=True, type=Path)
    parser.add_argument("--cores", default="", help="comma-separated NeuronCore per local rank")
    args = parser.parse_args()
    cores = tuple(int(c) for c in args.cores.split(",") if c)
    run_rank(args.device, args.process_group, args.timeout, args.result_dir, cores, args.give_up_at)


if __name__ == "__main__":
    main()
