"""Stage 2: device files, neuron-ls, torch.accelerator, a first device use, and the device count.

On neuron the count is checked against what this process may use (its NeuronCores, see cores.py) and against what the
run may use (the visible device nodes' cores, or NEURON_RT_VISIBLE_CORES). The instance type's full count is compared
only when the whole instance is visible: on a host always, in a container only when it was given every device node.
"""

from __future__ import annotations

import grp
import json
import os
import subprocess

import torch

from neuron_cell.instances import UnsupportedInstance, judge
from neuron_smoke import cores, release_facts
from neuron_smoke.backends import Backend, have_tool
from neuron_smoke.context import Context, StageLog
from neuron_smoke.errors import DeviceMissing
from neuron_smoke.host import in_container, instance_type_from_imds


def run(ctx: Context, log: StageLog) -> None:
    backend = ctx.backend
    nodes = backend.device_nodes()
    if nodes is not None:
        log.numbers["device_files"] = nodes
        if not nodes:
            raise DeviceMissing(f"no {backend.name} device: {backend.dev_glob} not found. {backend.missing_help}")
    if backend.name == "neuron":
        if cores.error():
            log.fail(cores.error())
            return
        if _refused(nodes or [], log):
            return
        _neuron_ls(ctx, log)
        listed = log.numbers.get("neuron_ls_devices")
        if listed is not None and nodes is not None and listed != len(nodes):
            log.note(f"neuron-ls lists {listed} device(s), {len(nodes)} device file(s) are visible")
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
    if not _first_use(backend, log):
        return
    if backend.name == "neuron":
        _neuron_count(ctx, log, count, nodes or [])
    else:
        _expected_count(ctx, log, count)
    log.summary = f"{count} {backend.name} device(s)" + (f", {len(nodes)} device file(s)" if nodes else "")


def permission_help(node: str) -> str:
    st = os.stat(node)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return (
        f"{node} is present but this user (uid {os.getuid()}) may not open it (mode {st.st_mode & 0o777:04o}, group "
        f"{group}, gid {st.st_gid}): a permission problem, not a missing device. On the host add the user to that "
        f"group (`sudo usermod -aG {group} $USER`, then log in again); in a container pass the group too: "
        f"`docker run --device={node} --group-add {st.st_gid} ...`."
    )


def _refused(nodes: list[str], log: StageLog) -> bool:
    refused = [n for n in nodes if not os.access(n, os.R_OK | os.W_OK)]
    for node in refused:
        log.fail(permission_help(node))
    return bool(refused)


def _first_use(backend: Backend, log: StageLog) -> bool:
    """One small computation on the device: the runtime starts here, and a device held by another process fails."""
    if backend.device_type == "cpu":
        return True
    try:
        value = (torch.ones(2, device=backend.device_type) + 1).sum().item()
    except RuntimeError as exc:
        message = str(exc).splitlines()[0]
        if "not available" in message:
            log.fail(f"the device is held by another process: {message}")
        elif "ermission denied" in message:
            log.fail(f"the device refused to open (a permission problem): {message}")
        else:
            log.fail(f"first use of the device failed: {message}")
        return False
    if value != 4.0:
        log.fail(f"first use of the device: (1 + 1) summed over 2 elements gave {value}, expected 4")
        return False
    return True


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


def _neuron_count(ctx: Context, log: StageLog, count: int, nodes: list[str]) -> None:
    plan = cores.current()
    if plan is None:
        return
    log.numbers["cores"] = plan.to_dict()
    if count != len(plan.process):
        log.fail(
            f"torch reports {count} neuron device(s); this process may use {len(plan.process)} "
            f"(NEURON_RT_VISIBLE_CORES={cores.format_cores(plan.process)})"
        )
    visible = len(plan.available)
    log.numbers["visible_cores"] = visible
    instance = ctx.options.instance_type or instance_type_from_imds()
    log.numbers["instance_type"] = instance
    if instance and not _supported(instance, "--instance-type" if ctx.options.instance_type else "IMDS", log):
        return
    expected = ctx.options.expected_devices
    if expected is None and instance:
        expected = _whole_instance(ctx, log, instance, len(nodes), plan.user_restricted)
    log.numbers["expected_device_count"] = expected
    if expected is None and "instance_device_count" not in log.numbers:
        log.note(f"expected device count unknown for instance type {instance or 'unknown'} (pass --expected-devices)")
    elif expected is not None and visible != expected:
        log.fail(f"{visible} NeuronCore(s) visible to this run, expected {expected} for {instance or 'this host'}")


def _supported(instance: str, source: str, log: StageLog) -> bool:
    """Whether the release supports this instance type (a Trn1 or Inf2 host fails with the release's reason)."""
    try:
        judge(release_facts.instance_table(), instance)
    except UnsupportedInstance as exc:
        log.fail(f"{exc} (the instance type from {source})")
        return False
    return True


def _whole_instance(ctx: Context, log: StageLog, instance: str, nodes: int, restricted: bool) -> int | None:
    full = ctx.backend.devices_per_instance.get(instance)
    if full is None:
        return None
    lnc = cores.lnc()
    full = full * cores.LNC_DEFAULT // lnc  # the table is at LNC=2; LNC=1 makes every physical core a device
    full_nodes = full * lnc // cores.PHYSICAL_CORES_PER_DEVICE
    log.numbers["instance_device_count"] = full
    if restricted:
        log.note("NEURON_RT_VISIBLE_CORES/NEURON_RT_NUM_CORES set: the count is not compared with the instance type")
        return None
    if nodes < full_nodes and in_container():
        log.note(
            f"{nodes} of the {full_nodes} device nodes of a {instance} were passed to this container: checked "
            f"against what it was given, not the whole instance ({full} devices)"
        )
        return None
    return full


def _expected_count(ctx: Context, log: StageLog, count: int) -> None:
    if ctx.backend.device_type == "cpu":
        expected = ctx.options.expected_devices
        if expected is not None:
            log.note(f"--expected-devices {expected} not checked: torch counts the CPU as one device")
        if ctx.options.instance_type is not None:
            log.note(f"--instance-type {ctx.options.instance_type} not used: it sets what a neuron or cuda run expects")
        return
    instance = ctx.options.instance_type or instance_type_from_imds()
    log.numbers["instance_type"] = instance
    expected = ctx.options.expected_devices
    if expected is None and instance:
        expected = ctx.backend.devices_per_instance.get(instance)
    log.numbers["expected_device_count"] = expected
    if expected is None:
        log.note(f"expected device count unknown for instance type {instance or 'unknown'} (pass --expected-devices)")
    elif count != expected:
        log.fail(f"{count} {ctx.backend.name} device(s) visible, expected {expected} for {instance or 'this host'}")
