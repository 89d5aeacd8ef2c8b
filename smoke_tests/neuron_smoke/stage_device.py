"""Stage 2: device files, neuron-ls, torch.accelerator, and the device count against the instance type."""

from __future__ import annotations

import json
import os
import subprocess

import torch

from neuron_smoke.backends import Backend, have_tool
from neuron_smoke.context import Context, StageLog
from neuron_smoke.errors import DeviceMissing
from neuron_smoke.host import instance_type_from_imds

LNC_DEFAULT = 2


def run(ctx: Context, log: StageLog) -> None:
    backend = ctx.backend
    nodes = backend.device_nodes()
    if nodes is not None:
        log.numbers["device_files"] = nodes
        if not nodes:
            raise DeviceMissing(f"no {backend.name} device: {backend.dev_glob} not found. {backend.missing_help}")
    if backend.name == "neuron":
        _neuron_ls(ctx, log)
    try:
        backend.import_module()
    except ImportError as exc:
        log.fail(f"cannot import {backend.module}: {exc}")
        return
    count = backend.device_count()
    log.numbers["device_count"] = count
    if count == 0:
        raise DeviceMissing(f"{backend.name}: torch reports 0 devices. {backend.missing_help}")
    _accelerator(backend, log)
    _expected_count(ctx, log, count)
    log.summary = f"{count} {backend.name} device(s)" + (f", {len(nodes)} device file(s)" if nodes else "")


def _neuron_ls(ctx: Context, log: StageLog) -> None:
    exe = have_tool("neuron-ls")
    if exe is None:
        log.note("neuron-ls not on PATH (aws-neuronx-tools not installed); skipped its check")
        return
    try:
        proc = subprocess.run(
            [exe, "--json-output"], capture_output=True, text=True, timeout=min(60, ctx.options.timeout_s), check=False
        )
    except subprocess.TimeoutExpired:
        log.fail("neuron-ls --json-output timed out")
        return
    if proc.returncode != 0:
        log.fail(f"neuron-ls --json-output exited {proc.returncode}: {proc.stderr.strip()[:300]}")
        return
    try:
        devices = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        log.fail(f"neuron-ls --json-output printed no JSON: {exc}")
        return
    listed = devices if isinstance(devices, list) else devices.get("neuron_devices", [])
    log.numbers["neuron_ls_devices"] = len(listed)
    if not listed:
        log.fail("neuron-ls lists no Neuron devices")


def _accelerator(backend: Backend, log: StageLog) -> None:
    current = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    log.numbers["accelerator"] = current.type if current is not None else None
    if backend.device_type == "cpu":
        return
    if current is None or current.type != backend.device_type:
        found = current.type if current is not None else "none"
        log.fail(f"torch.accelerator reports {found!r}, expected {backend.device_type!r}")


def _expected_count(ctx: Context, log: StageLog, count: int) -> None:
    backend = ctx.backend
    if backend.device_type == "cpu":
        return
    instance = ctx.options.instance_type or instance_type_from_imds()
    log.numbers["instance_type"] = instance
    expected = ctx.options.expected_devices
    if expected is None and instance:
        expected = backend.devices_per_instance.get(instance)
        if expected is not None and backend.name == "neuron":
            # The table assumes the default LNC=2; LNC=1 exposes every physical core as a device.
            lnc = int(os.environ.get("NEURON_LOGICAL_NC_CONFIG", LNC_DEFAULT))
            expected = expected * LNC_DEFAULT // lnc
    if backend.name == "neuron" and os.environ.get("NEURON_RT_VISIBLE_CORES") and ctx.options.expected_devices is None:
        log.note("NEURON_RT_VISIBLE_CORES is set: the device count is not compared with the instance type")
        expected = None
    log.numbers["expected_device_count"] = expected
    if expected is None:
        log.note(f"expected device count unknown for instance type {instance or 'unknown'} (pass --expected-devices)")
    elif count != expected:
        log.fail(f"{count} {backend.name} device(s) visible, expected {expected} for {instance or 'this host'}")
