"""neuron_smoke.stage_nccom: node 0 runs a stand-in `nccom-test` (written here: it records its argv and environment,
writes its JSON report, then passes, fails or hangs) with the command line and environment Neuron documents; the
other nodes take node 0's verdict from the store."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neuron_smoke import cores, release_facts, rendezvous, stage_nccom
from neuron_smoke.backends import CPU
from neuron_smoke.cluster import ClusterSpec
from neuron_smoke.context import Context, Options, StageLog
from neuron_smoke.errors import Skip

FAKE = """#!{python}
import json, os, subprocess, sys, time
record = os.environ.get("FAKE_NCCOM_RECORD")
if record:
    keep = ("NEURON_RT_ROOT_COMM_ID", "CCOM_SOCKET_IFNAME", "NEURON_RT_VISIBLE_CORES")
    seen = {{"argv": sys.argv, "env": {{k: os.environ[k] for k in keep if k in os.environ}}}}
    with open(record, "a") as file:
        file.write(json.dumps(seen) + "\\n")
mode = os.environ.get("FAKE_NCCOM_MODE", "pass")
if mode == "hang":
    child = subprocess.Popen(["sleep", "600"])
    with open(os.environ["FAKE_NCCOM_CHILD"], "w") as file:
        file.write(str(child.pid))
    time.sleep(600)
with open(sys.argv[sys.argv.index("--report-to-json-file") + 1], "w") as file:
    json.dump({{"written by": "the fake nccom-test", "sizes": [8, 2147483648]}}, file)
print("       size(B)    count(elems)    type    time(us)    algbw(GB/s)    busbw(GB/s)")
print("             8               2    fp32         520           0.00           0.00")
print("    2147483648       536870912    fp32       41806          23.92          47.09")
if mode == "fail":
    print("    2147483648    Failure running neuron-bench - log file /tmp/nccom_test_log_x.log")
    print("1 errors found - test failed")
    sys.exit(1)
print("Avg bus bandwidth:      23.5450GB/s")
"""


def write_fake(folder: Path) -> Path:
    """A folder holding a stand-in `nccom-test`: FAKE_NCCOM_RECORD=FILE gets a line of its argv and environment,
    FAKE_NCCOM_MODE=pass|fail|hang (FAKE_NCCOM_CHILD=FILE: the pid of the child a hanging one starts)."""
    folder.mkdir(parents=True, exist_ok=True)
    fake = folder / "nccom-test"
    fake.write_text(FAKE.format(python=sys.executable))
    fake.chmod(0o755)
    return folder


def records(path: Path) -> list[dict[str, Any]]:
    """What the fake recorded, one entry a run."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Neuron host of 8 visible cores whose PATH holds the fake nccom-test (and no other)."""
    bin_dir = write_fake(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setattr(stage_nccom, "NEURON_BIN", str(tmp_path / "no-neuron-bin"))
    monkeypatch.delenv(stage_nccom.ENV, raising=False)
    for name in (stage_nccom.ROOT_COMM, stage_nccom.IFNAME, "NEURON_RT_NUM_CORES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(cores.VISIBLE, "0-7")
    monkeypatch.setitem(cores._state, "plan", None)  # (cores.prepare() was not run in this process)
    monkeypatch.setenv("FAKE_NCCOM_RECORD", str(tmp_path / "record.json"))
    return tmp_path


@pytest.fixture
def node0(monkeypatch: pytest.MonkeyPatch) -> Iterator[rendezvous.Session]:
    """Node 0 of two (node 1 at 10.0.0.2), its store on loopback."""
    monkeypatch.setattr(rendezvous, "_current", [])
    spec = ClusterSpec(2, 0, "127.0.0.1", free_port(), join_timeout_s=0.5, local_addr="127.0.0.1")
    session = rendezvous.session(spec)
    session.members = (0, 1)
    session.hosts[1] = {"local_addr": "10.0.0.2"}
    yield session
    session.members = (0,)  # (node 1 never was: close without waiting for it)
    rendezvous.close()


def run_node0(session: rendezvous.Session, timeout_s: float = 60.0) -> tuple[StageLog, dict[str, Any]]:
    log = StageLog()
    stage_nccom.run(Context(options=Options(cluster=session.spec, timeout_s=timeout_s), backend=CPU), log)
    return log, json.loads(session.store.get(stage_nccom.KEY))


def test_node0_runs_the_documented_command_and_passes(host: Path, node0: rendezvous.Session) -> None:
    log, published = run_node0(node0)
    assert not log.failures, log.failures
    (seen,) = records(host / "record.json")
    report = seen["argv"][-1]
    assert seen["argv"] == [
        str(host / "bin" / "nccom-test"),
        *("-r", "16", "-N", "2", "-b", "8", "-e", "2G", "-f", "2", "-n", "5", "-w", "5", "-d", "fp32", "allr"),
        *("--hosts", "127.0.0.1", "10.0.0.2", "--check", "--stats", "p50", "p99", "--non-interactive"),
        *("--report-to-json-file", report),
    ]
    assert not Path(report).exists()  # its temp folder is gone
    assert seen["env"] == {
        "NEURON_RT_ROOT_COMM_ID": "127.0.0.1:63182",
        "CCOM_SOCKET_IFNAME": "lo",
        cores.VISIBLE: "0-7",
    }
    assert log.numbers["report"] == {"written by": "the fake nccom-test", "sizes": [8, 2147483648]}
    assert log.numbers["avg_busbw_gbps"] == 23.545 and log.numbers["cores_per_node"] == 8
    assert log.numbers["table"][1] == {
        "size(B)": 2147483648,
        "count(elems)": 536870912,
        "type": "fp32",
        "time(us)": 41806,
        "algbw(GB/s)": 23.92,
        "busbw(GB/s)": 47.09,
    }
    assert log.summary.startswith("nccom-test fp32 all_reduce over 2 node(s), 16 ranks, --check passed; average bus")
    assert published["summary"] == log.summary and published["failures"] == []
    assert "report" not in published["numbers"] and published["numbers"]["table"] == log.numbers["table"]


def test_a_failing_run_fails_with_its_last_lines(
    host: Path, node0: rendezvous.Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NCCOM_MODE", "fail")
    log, published = run_node0(node0)
    assert log.failures[0].startswith("nccom-test exited 1: ")
    assert log.failures[0].endswith(
        "Failure running neuron-bench - log file /tmp/nccom_test_log_x.log | 1 errors found - test failed"
    )
    assert published["failures"] == log.failures and log.numbers["avg_busbw_gbps"] is None


def test_a_hung_run_is_killed_with_its_process_group(
    host: Path, node0: rendezvous.Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NCCOM_MODE", "hang")
    monkeypatch.setenv("FAKE_NCCOM_CHILD", str(host / "child.pid"))
    started = time.monotonic()
    log, published = run_node0(node0, timeout_s=stage_nccom.MARGIN_S + 2)
    assert time.monotonic() - started < 10
    assert log.failures[0].startswith(
        "nccom-test did not finish within 2s (the stage's --timeout less 10s): killed with its process group"
    )
    assert published["failures"] == log.failures
    child = int((host / "child.pid").read_text())
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)  # what it started went with it


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_absent_skips_and_a_named_one_that_is_not_there_fails(
    host: Path, node0: rendezvous.Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(host / "empty"))
    with pytest.raises(Skip, match=r"nccom-test not found \(not on PATH, not in .*no-neuron-bin\): not a Neuron host"):
        run_node0(node0)
    assert json.loads(node0.store.get(stage_nccom.KEY))["skip"].startswith("nccom-test not found")
    monkeypatch.setenv(stage_nccom.ENV, str(host / "bin" / "nccom-tset"))
    log, published = run_node0(node0)
    assert log.failures == [
        f"{stage_nccom.ENV}={host}/bin/nccom-tset: not an executable file (name nccom-test's path, or unset it)"
    ]
    assert published["failures"] == log.failures
    monkeypatch.setenv(stage_nccom.ENV, str(host / "bin" / "nccom-test"))  # the named one is run, off PATH
    log, _ = run_node0(node0)
    assert not log.failures and log.numbers["command"][0] == str(host / "bin" / "nccom-test")


def test_a_single_host_skips() -> None:
    with pytest.raises(Skip, match="single host"):
        stage_nccom.run(Context(options=Options(), backend=CPU), StageLog())


def test_cores_per_node_from_the_visible_cores_else_the_release(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(cores._state, "plan", None)
    monkeypatch.delenv(release_facts.ENV, raising=False)  # the packaged release's facts
    release_facts.load.cache_clear()
    monkeypatch.setenv(cores.VISIBLE, "0-3,8")
    ctx = Context(options=Options(instance_type="trn2.48xlarge"), backend=CPU)
    assert stage_nccom.cores_per_node(ctx) == (5, "this node's visible NeuronCores (restricted)")
    monkeypatch.delenv(cores.VISIBLE)
    monkeypatch.delenv("NEURON_RT_NUM_CORES", raising=False)
    monkeypatch.setenv(stage_nccom.DEV_GLOB, str(tmp_path / "neuron*"))
    assert stage_nccom.cores_per_node(ctx) == (64, "the release's logical devices of trn2.48xlarge")
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    assert stage_nccom.cores_per_node(ctx)[0] == 128
    (tmp_path / "neuron0").touch()
    assert stage_nccom.cores_per_node(ctx) == (8, "this node's visible NeuronCores")  # one device at LNC=1
    (tmp_path / "neuron0").unlink()
    count, why = stage_nccom.cores_per_node(Context(options=Options(), backend=CPU))
    assert count == 0 and "documents none for instance type unknown (pass --instance-type)" in why


def test_environment_keeps_the_users_values_and_the_runs_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = cores.CorePlan(available=(0, 1, 2, 3), process=(2,), ranks=(0, 1), user_restricted=True)
    monkeypatch.setitem(cores._state, "plan", plan)
    base = {cores.VISIBLE: "2", stage_nccom.ROOT_COMM: "10.1.1.1:5000", stage_nccom.IFNAME: "ens5"}
    _, chosen = stage_nccom.environment(base, "fe80::1", "127.0.0.1")
    assert chosen == {stage_nccom.ROOT_COMM: "10.1.1.1:5000", stage_nccom.IFNAME: "ens5", cores.VISIBLE: "0-3"}
    monkeypatch.setitem(cores._state, "plan", cores.CorePlan((0, 1, 2, 3), (2,), (0, 1), False))
    _, chosen = stage_nccom.environment({cores.VISIBLE: "2"}, "fe80::1", "192.0.2.77")
    assert chosen == {stage_nccom.ROOT_COMM: "[fe80::1]:63182"}  # no interface holds 192.0.2.77 here
    assert stage_nccom.interface_of("127.0.0.5") == "lo" and stage_nccom.interface_of("node-0") is None


class Store:
    def __init__(self, keys: dict[str, str]) -> None:
        self.keys = keys

    def check(self, names: list[str]) -> bool:
        return all(n in self.keys for n in names)

    def get(self, name: str) -> bytes:
        return self.keys[name].encode()


class Peer:
    """Node 1's session as the follower sees it: the store's keys, and whether node 0's heartbeat stopped."""

    def __init__(self, keys: dict[str, str], node0_silent: bool = False) -> None:
        self.store, self.node0_silent = Store(keys), node0_silent
        self.rank, self.blamed = 1, dict[int, list[str]]()

    def stalled(self, rank: int) -> bool:
        return self.node0_silent

    def blame(self, rank: int, what: str) -> None:
        self.blamed.setdefault(rank, []).append(what)


def follow(peer: Peer, timeout_s: float = 30.0) -> StageLog:
    log = StageLog()
    ctx = Context(options=Options(cluster=ClusterSpec(2, 1, "h", 1), timeout_s=timeout_s), backend=CPU)
    stage_nccom.follow(ctx, peer, log)  # type: ignore[arg-type]
    return log


def test_the_other_nodes_hold_node0s_verdict() -> None:
    passed = {"failures": [], "summary": "nccom-test ... --check passed", "numbers": {"avg_busbw_gbps": 23.5}}
    log = follow(Peer({stage_nccom.KEY: json.dumps(passed)}))
    assert not log.failures and log.summary == "node 0 ran it for the cluster: nccom-test ... --check passed"
    assert log.numbers == {"ran_on_node": 0, "avg_busbw_gbps": 23.5}
    log = follow(Peer({stage_nccom.KEY: json.dumps({"failures": ["nccom-test exited 1: x"]})}))
    assert log.failures == ["node 0's nccom-test run: nccom-test exited 1: x"]
    with pytest.raises(Skip, match=r"^node 0: nccom-test not found"):
        follow(Peer({stage_nccom.KEY: json.dumps({"skip": "nccom-test not found (...)"})}))


def test_the_other_nodes_never_wait_for_ever() -> None:
    silent = Peer({}, node0_silent=True)
    with pytest.raises(Skip, match="node 0 stopped answering before its nccom-test verdict"):
        follow(silent)
    assert silent.blamed == {0: ["nccom: stopped answering before its nccom-test verdict (heartbeat silent)"]}
    assert follow(Peer({"done/0": "1"})).failures == [
        "node 0 finished without an nccom-test verdict (was nccom among its --stages?)"
    ]
    started = time.monotonic()
    log = follow(Peer({}), timeout_s=3.0)
    assert log.failures == ["node 0 gave no nccom-test verdict within 1s (the stage's --timeout less 2s)"]
    assert time.monotonic() - started < 3
