"""Cluster stage: the libfabric provider the release uses between nodes is present (`fi_info -p PROVIDER`), and on
EFA, the `/dev/infiniband/uverbs*` nodes against the instance type's documented EFA device count.

The provider is the release's (release_facts: `[fabric] provider` of the matrix, `efa` on AWS; the test release
names `tcp`), never an option. `NEURON_SMOKE_UVERBS_GLOB` points the device count at other files (tests).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

from neuron_smoke import release_facts
from neuron_smoke.context import Context, StageLog
from neuron_smoke.errors import Skip

UVERBS_GLOB = "/dev/infiniband/uverbs*"
SINGLE_HOST = "single host: the cluster stages run in multi-node mode (--nnodes N, or under Slurm or torchrun)"
NO_EFA_HELP = (
    "EFA is not usable here (Neuron's collectives then fail with 'OFI plugin initNet() failed is EFA enabled?'): "
    "an EFA-enabled instance with the EFA installer (aws-efa-installer) run, and in a container every "
    "/dev/infiniband/uverbsN passed in with --device"
)


def run(ctx: Context, log: StageLog) -> None:
    if ctx.options.cluster is None:
        raise Skip(SINGLE_HOST)
    facts = release_facts.fabric()
    provider = facts["provider"]
    log.numbers.update(provider=provider, release_facts=facts["source"])
    if not provider:
        log.fail(f"the release data ({facts['source']}) names no fabric provider: set [fabric] provider in the matrix")
        return
    fi_info = shutil.which("fi_info")
    if fi_info is None:
        log.fail(
            f"fi_info is not on PATH: libfabric's tools are missing, so the {provider} provider cannot be checked "
            "(install libfabric: the EFA installer on AWS, `libfabric-bin` on Debian)"
        )
        return
    listed = _fi_info(fi_info, provider, log)
    if listed is None:
        return
    log.numbers.update(fi_info=fi_info, endpoints=len(listed), domains=sorted({d for _, d in listed}))
    log.summary = f"libfabric provider {provider}: {len(listed)} endpoint(s) on {len({d for _, d in listed})} domain(s)"
    if provider.split(";")[0] == "efa":
        _efa_devices(ctx, log, facts["efa_devices"])


def _fi_info(fi_info: str, provider: str, log: StageLog) -> list[tuple[str, str]] | None:
    try:
        proc = subprocess.run([fi_info, "-p", provider], capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        log.fail(f"`fi_info -p {provider}` did not finish in 30s")
        return None
    except OSError as error:
        log.fail(f"`fi_info -p {provider}` could not run ({fi_info}: {error.strerror})")
        return None
    listed = [entry for entry in provider_entries(proc.stdout) if provider in entry[0].split(";")]
    if proc.returncode != 0 or not listed:
        answer = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").splitlines()[0]
        help_ = NO_EFA_HELP if provider == "efa" else f"libfabric here has no usable {provider} provider"
        log.fail(f"`fi_info -p {provider}` lists no {provider} provider ({answer}): {help_}")
        return None
    return listed


def provider_entries(output: str) -> list[tuple[str, str]]:
    """(provider, domain) of each entry `fi_info` prints (`provider: tcp;ofi_rxm` ... `domain: eth0`)."""
    entries: list[tuple[str, str]] = []
    for line in output.splitlines():
        key, _, value = line.strip().partition(":")
        if key == "provider":
            entries.append((value.strip(), ""))
        elif key == "domain" and entries and not entries[-1][1]:
            entries[-1] = (entries[-1][0], value.strip())
    return entries


def _efa_devices(ctx: Context, log: StageLog, documented: dict[str, int]) -> None:
    instance = ctx.instance_type()
    found = sorted(glob.glob(os.environ.get("NEURON_SMOKE_UVERBS_GLOB") or UVERBS_GLOB))
    log.numbers.update(uverbs=len(found), instance_type=instance, efa_devices_documented=documented.get(instance or ""))
    problem, note = judge_devices(len(found), instance, documented.get(instance or ""))
    if problem:
        log.fail(f"{problem}: {NO_EFA_HELP}")
    if note:
        log.note(note)


def judge_devices(found: int, instance: str | None, expected: int | None) -> tuple[str, str]:
    """(failure, note) for `found` uverbs nodes on `instance`, whose documented EFA count is `expected`."""
    if found == 0:
        return f"no EFA device nodes ({UVERBS_GLOB})", ""
    if expected is None:
        where = instance or "this instance type (unknown: pass --instance-type)"
        return "", f"{found} EFA device(s); the release documents no EFA device count for {where}: presence checked"
    if found < expected:
        return f"{found} EFA device(s), {instance} documents {expected} (a missing or unpassed EFA device)", ""
    return "", f"{found} EFA device(s), {instance} documents {expected}"
