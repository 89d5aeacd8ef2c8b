"""One rank of the collectives stage, started by torchrun: all_reduce(rank + 1) over the backend's process group."""

from __future__ import annotations

import argparse
import json
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from neuron_smoke.backends import BACKENDS

MARKER = "NEURON_SMOKE_ALLREDUCE "


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", required=True, choices=sorted(BACKENDS))
    parser.add_argument("--process-group", required=True)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    backend = BACKENDS[args.device]
    backend.import_module()
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    device = torch.device("cpu") if backend.device_type == "cpu" else torch.device(backend.device_type, local)
    if backend.device_type != "cpu":
        torch.accelerator.set_device_index(local)
    dist.init_process_group(
        backend=args.process_group,
        init_method="env://",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=args.timeout),
    )
    try:
        value = torch.tensor([float(rank + 1)], device=device)
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        print(MARKER + json.dumps({"rank": rank, "world_size": world, "value": value.cpu().item()}), flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
