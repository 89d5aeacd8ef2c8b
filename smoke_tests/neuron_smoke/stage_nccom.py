"""Cluster stage: Neuron's own collectives test, `nccom-test` (aws-neuronx-tools), across the nodes. This is the
command aws-k8s-tester's Neuron suite runs as its multi-node test (../shared/NEURON-FACTS.md §14): an fp32
all_reduce from 8 B to 2 GiB (factor 2, 5 timed and 5 warm-up calls), with `--check` verifying the results across
the ranks.

Node 0 runs it once for the cluster: `-N` the members, `-r` their NeuronCores, `--hosts` the members' addresses
in rank order. The cores per node are this node's visible cores, else the release's logical devices of the instance
type; every node is taken to have as many. `NEURON_RT_ROOT_COMM_ID` is the master's address, port 63182.
`CCOM_SOCKET_IFNAME` is the interface that holds node 0's address. A value of either already in the environment is
kept. nccom-test starts the ranks on the hosts itself (MPI, over passwordless ssh, as Neuron documents).

Exit 0 passes; any other exit fails with its last lines of output. A run past the stage's deadline less MARGIN_S
is killed with its process group, and the stage fails naming the limit. No bandwidth floor is documented
(aws-k8s-tester passes on the job's success): the table and the average bus bandwidth it prints are reported. The
JSON it writes (`--report-to-json-file`) goes into node 0's report as written, up to REPORT_MAX_BYTES. Its fields
are not documented, so nothing reads them. The verdict reaches every other node through the rendezvous store, and
each node's report holds it.

Which nccom-test: `$NEURON_SMOKE_NCCOM_TEST` when set (a path; one that is not an executable file fails), else
`nccom-test` on PATH, else in NEURON_BIN. None of them: the stage skips, as this is not a Neuron host.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from neuron_smoke import cores, release_facts, rendezvous
from neuron_smoke.context import Context, StageLog
from neuron_smoke.errors import Skip, UsageError
from neuron_smoke.stage_fabric import SINGLE_HOST

ENV = "NEURON_SMOKE_NCCOM_TEST"
NEURON_BIN = "/opt/aws/neuron/bin"  # where aws-neuronx-tools installs its tools
ROOT_COMM_PORT = 63182
ROOT_COMM = "NEURON_RT_ROOT_COMM_ID"
IFNAME = "CCOM_SOCKET_IFNAME"
BENCH = ("-b", "8", "-e", "2G", "-f", "2", "-n", "5", "-w", "5", "-d", "fp32", "allr")
KEY = "nccom/verdict"  # node 0's verdict in the rendezvous store
MARGIN_S = 10.0  # nccom-test's limit is the stage's deadline less this, so that its verdict still reaches the others
REPORT_MAX_BYTES = 256 << 10
OUTPUT_MAX_BYTES = 1 << 20  # of its output, the last this many bytes are read
TAIL_LINES = 15
AVERAGE = re.compile(r"Avg bus bandwidth:\s*([0-9.]+)\s*GB/s")
FAILED = re.compile(r"errors? found - test failed")  # what nccom-test prints when a benchmark failed
SIOCGIFADDR = 0x8915
DEV_GLOB = "NEURON_SMOKE_DEV_GLOB"  # (the neuron backend's: tests point it at other files)


def run(ctx: Context, log: StageLog) -> None:
    if ctx.options.cluster is None:
        raise Skip(SINGLE_HOST)
    session = rendezvous.joined(ctx.options.cluster, log)
    if session is not None and session.rank != 0:
        follow(ctx, session, log)
    elif session is not None:
        lead(ctx, session, log)


def lead(ctx: Context, session: rendezvous.Session, log: StageLog) -> None:
    """Node 0: run nccom-test, then publish the verdict (a skip or a failure too) for the others."""
    try:
        run_here(ctx, session, log)
    except Skip as skip:
        publish(session, {"skip": str(skip)})
        raise
    except Exception as error:
        first = (str(error).strip().splitlines() or [""])[0]
        publish(session, {"failures": [*log.failures, f"{type(error).__name__}: {first}"]})
        raise
    shared = {k: v for k, v in log.numbers.items() if k != "report"}
    publish(session, {"failures": log.failures, "summary": log.summary, "numbers": shared})


def publish(session: rendezvous.Session, verdict: dict[str, Any]) -> None:
    session.store.set(KEY, json.dumps(verdict))


def run_here(ctx: Context, session: rendezvous.Session, log: StageLog) -> None:
    try:
        exe = find_tool(os.environ)
    except UsageError as error:
        log.fail(str(error))
        return
    per_node, source = cores_per_node(ctx)
    if not per_node:
        log.fail(source)
        return
    assert ctx.options.cluster is not None
    hosts = [str(session.hosts[r]["local_addr"]) for r in session.members]
    limit = max(1.0, ctx.options.timeout_s - MARGIN_S)
    env, set_here = environment(os.environ, ctx.options.cluster.master_addr, session.local_addr)
    with tempfile.TemporaryDirectory(prefix="neuron-smoke-nccom-") as tmp:
        report = Path(tmp) / "nccom-report.json"
        argv = command(exe, per_node * len(hosts), hosts, report)
        log.numbers.update(
            command=argv, env=set_here, cores_per_node=per_node, cores_from=source, hosts=hosts, limit_s=limit
        )
        _notes(ctx, session, log, env)
        started = time.monotonic()
        try:
            code = run_bounded(argv, env, limit, Path(tmp) / "output.txt")
        except OSError as error:
            log.fail(f"{exe} could not run: {error.strerror}")
            return
        log.numbers["duration_s"] = round(time.monotonic() - started, 3)
        judge(log, code, read_tail(Path(tmp) / "output.txt"), report, limit)


def find_tool(env: Mapping[str, str]) -> str:
    """The nccom-test to run; Skip when there is none; UsageError when $NEURON_SMOKE_NCCOM_TEST names no program."""
    named = env.get(ENV, "").strip()
    if named:
        if not (os.path.isfile(named) and os.access(named, os.X_OK)):
            raise UsageError(f"{ENV}={named}: not an executable file (name nccom-test's path, or unset it)")
        return named
    found = shutil.which("nccom-test") or shutil.which("nccom-test", path=NEURON_BIN)
    if found is None:
        raise Skip(
            f"nccom-test not found (not on PATH, not in {NEURON_BIN}): not a Neuron host, or aws-neuronx-tools is "
            f"not installed; {ENV}=PATH names another"
        )
    return found


def cores_per_node(ctx: Context) -> tuple[int, str]:
    """(NeuronCores per node, where that is from); (0, why) when it cannot be told."""
    plan = cores.current()
    try:
        if plan is not None:
            visible, restricted = plan.available, plan.user_restricted
        else:
            visible, restricted = cores.available_cores(len(glob.glob(os.environ.get(DEV_GLOB) or "/dev/neuron*")))
        if visible:
            return len(visible), "this node's visible NeuronCores" + (" (restricted)" if restricted else "")
        instance = ctx.instance_type()
        documented = release_facts.logical_devices().get(instance or "")
        if documented:
            return documented * cores.LNC_DEFAULT // cores.lnc(), f"the release's logical devices of {instance}"
    except UsageError as error:
        return 0, f"cannot tell the NeuronCores per node: {error}"
    return 0, (
        "cannot tell the NeuronCores per node (nccom-test's -r): no Neuron device is visible here and the release "
        f"documents none for instance type {instance or 'unknown'} (pass --instance-type)"
    )


def command(exe: str, ranks: int, hosts: list[str], report: Path) -> list[str]:
    # --check may take a value (random, all_ones): it is followed by another option, never by the operation
    head = [exe, "-r", str(ranks), "-N", str(len(hosts)), *BENCH, "--hosts", *hosts, "--check"]
    return [*head, "--stats", "p50", "p99", "--non-interactive", "--report-to-json-file", str(report)]


def environment(base: Mapping[str, str], master_addr: str, local_addr: str) -> tuple[dict[str, str], dict[str, str]]:
    """nccom-test's environment, and the values of it this stage chose (or kept from the environment)."""
    env = dict(base)
    plan = cores.current()
    if plan is not None and plan.ranks:  # cores.prepare() restricted this process to its own cores: not the run's
        if plan.user_restricted:
            env[cores.VISIBLE] = cores.format_cores(plan.available)
        else:
            env.pop(cores.VISIBLE, None)
    host = f"[{master_addr}]" if ":" in master_addr else master_addr
    env.setdefault(ROOT_COMM, f"{host}:{ROOT_COMM_PORT}")
    name = interface_of(local_addr)
    if name and not env.get(IFNAME):
        env[IFNAME] = name
    return env, {k: env[k] for k in (ROOT_COMM, IFNAME, cores.VISIBLE) if k in env}


def interface_of(addr: str) -> str | None:
    """The network interface whose (primary IPv4) address is `addr`, `lo` for a loopback address; None if unknown."""
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return None
    names = [name for _, name in socket.if_nameindex()]
    if ip.is_loopback:
        return "lo" if "lo" in names else None
    for name in names if ip.version == 4 else ():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:
                answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
        if socket.inet_ntoa(answer[20:24]) == addr:
            return name
    return None


def _notes(ctx: Context, session: rendezvous.Session, log: StageLog, env: dict[str, str]) -> None:
    if session.missing:
        log.note(f"run across the {len(session.members)} member(s) only: {session.missing_note()}")
    if IFNAME not in env:
        log.note(f"{IFNAME} not set: no interface here holds {session.local_addr} (set it to the nodes' interface)")
    plan, device = cores.current(), ctx.results.get("device")
    if ctx.device != "cpu" and plan is not None and device is not None and device.status != "skip":
        log.note(
            f"this process holds NeuronCore(s) {cores.format_cores(plan.process)} since the device stages ran, on "
            "every node: if nccom-test fails on a core in use, run `--stages nccom` on its own"
        )


def run_bounded(argv: list[str], env: dict[str, str], limit_s: float, out: Path) -> int | None:
    """nccom-test's exit status, its output in `out`; None when it was killed at `limit_s`; OSError when it cannot
    start."""
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            argv, env=env, cwd=out.parent, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            return proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            return None
        finally:  # its process group: what it started and left behind, or all of it when it ran out of time
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def read_tail(path: Path) -> str:
    with path.open("rb") as file:
        file.seek(max(0, path.stat().st_size - OUTPUT_MAX_BYTES))
        return file.read().decode("utf-8", "replace")


def judge(log: StageLog, code: int | None, output: str, report: Path, limit_s: float) -> None:
    lines = [line.rstrip()[:300] for line in output.splitlines() if line.strip()]
    tail = " | ".join(lines[-TAIL_LINES:]) or "(no output)"
    log.numbers.update(exit_code=code, table=table(lines), output_tail=lines[-TAIL_LINES:])
    average = AVERAGE.search(output)
    log.numbers["avg_busbw_gbps"] = float(average[1]) if average else None
    keep_report(log, report)
    failed = FAILED.search(output)
    if code is None:
        log.fail(
            f"nccom-test did not finish within {limit_s:g}s (the stage's --timeout less {MARGIN_S:g}s): killed with "
            f"its process group; its last output: {tail}"
        )
    elif code != 0:
        log.fail(f"nccom-test exited {code}: {tail}")
    elif failed:
        log.fail(f"nccom-test exited 0 but printed '{failed[0]}': {tail}")
    else:
        ranks, nodes = log.numbers["command"][2], log.numbers["command"][4]
        bandwidth = f"; average bus bandwidth {average[1]} GB/s (no documented floor: reported)" if average else ""
        log.summary = f"nccom-test fp32 all_reduce over {nodes} node(s), {ranks} ranks, --check passed{bandwidth}"


def table(lines: list[str]) -> list[dict[str, Any]]:
    """The rows of the table nccom-test prints, keyed by its own header (the line naming `size(B)`)."""
    header = next((line.split() for line in lines if "size(B)" in line), None)
    if header is None:
        return []
    rows = []
    for line in lines:
        cells = line.split()
        if len(cells) == len(header) and cells[0].isdigit():
            rows.append(dict(zip(header, map(_number, cells), strict=True)))
    return rows[:64]


def _number(text: str) -> int | float | str:
    for kind in (int, float):
        with contextlib.suppress(ValueError):
            return kind(text)
    return text


def keep_report(log: StageLog, report: Path) -> None:
    if not report.is_file():
        log.note(f"nccom-test wrote no JSON report ({report.name}): its table is all there is")
        return
    size = report.stat().st_size
    log.numbers["report_bytes"] = size
    if size > REPORT_MAX_BYTES:
        log.note(f"nccom-test's JSON report is {size} B, over the {REPORT_MAX_BYTES} B kept: left out")
        return
    try:
        log.numbers["report"] = json.loads(report.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        log.note(f"nccom-test's report is not JSON ({error}): left out")


def follow(ctx: Context, session: rendezvous.Session, log: StageLog) -> None:
    """A node other than node 0: node 0's verdict, once it is in the store (or node 0 is gone, or time is up)."""
    log.numbers["ran_on_node"] = 0
    wait = max(1.0, ctx.options.timeout_s - 2.0)
    verdict, why = await_verdict(session, wait)
    if verdict is None:
        if why == "silent":
            session.blame(0, "nccom: stopped answering before its nccom-test verdict (heartbeat silent)")
            raise Skip("node 0 stopped answering before its nccom-test verdict (heartbeat silent): its report holds it")
        log.fail(why)
        return
    if "skip" in verdict:
        raise Skip(f"node 0: {verdict['skip']}")
    log.numbers.update(verdict.get("numbers") or {})
    for failure in verdict.get("failures") or []:
        log.fail(f"node 0's nccom-test run: {failure}")
    if verdict.get("summary"):
        log.summary = f"node 0 ran it for the cluster: {verdict['summary']}"


def await_verdict(session: rendezvous.Session, timeout_s: float) -> tuple[dict[str, Any] | None, str]:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            done = session.store.check(["done/0"])  # (before the verdict: node 0 says done after its verdict)
            if session.store.check([KEY]):
                return json.loads(session.store.get(KEY)), ""
        except Exception:  # the store is gone: node 0 has stopped
            return None, "silent"
        if done:
            return None, "node 0 finished without an nccom-test verdict (was nccom among its --stages?)"
        if session.stalled(0):
            return None, "silent"
        if time.monotonic() > deadline:
            return None, f"node 0 gave no nccom-test verdict within {timeout_s:g}s (the stage's --timeout less 2s)"
        time.sleep(rendezvous.POLL_S)
