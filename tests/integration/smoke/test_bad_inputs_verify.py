"""Bad input to verify-device (issue 29): every bad option, file, output path, environment variable and flag
combination is refused at validation, before torch is imported, in one line naming the problem (exit 2), never a
traceback, and nothing is left behind (no report, baseline, temp file or crash log). Ctrl-C during a run is one line,
exit 130, and the report written so far says "interrupted", never "hung".

Un-writable folders as root (CI runs these as root, and root ignores permission bits): /sys/kernel (sysfs refuses to
create a file, EACCES, even for root), /proc (ENOENT for any new name) and a path under a plain file (ENOTDIR)."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from neuron_smoke import cli, cores, validate
from neuron_smoke.evaluate import BASELINE_SCHEMA
from tests import written
from tests.integration.smoke.conftest import SIM_CELL

REPO = Path(__file__).resolve().parents[2]
LONG = "x" * 5000
ARGPARSE = 1  # argparse's usage errors: one line naming --help (boundary.OneLineParser)
MODEL = "neuron_smoke.examples.mlp:build"
NODE_1 = ["--nnodes", "2", "--node-rank", "1", "--master", "127.0.0.1", "--report-dir", "{out}"]


class Case(NamedTuple):
    id: str
    argv: list[str]
    message: str
    lines: int = 1
    env: dict[str, str] = {}  # noqa: RUF012  (a NamedTuple default, never mutated)


def safetensors(header: object, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


TENSOR = {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}
# name -> files of an input folder (a baseline) or the content of an input file
FILES: dict[str, str | bytes | dict[str, str | bytes]] = {
    "binary": b"\xff\xfe\x00\x81 not text",
    "nul": b'{"schema": 1}\x00\x00',
    "empty": "",
    "not_json": "{not json",
    "a_list": "[]",
    "old_schema": json.dumps({**SIM_CELL, "schema": 0}),
    "cell": json.dumps(SIM_CELL),
    "file": "a plain file\n",
    "base_no_index": {"tensors.safetensors": b""},
    "base_bad_index": {"index.json": "{not json"},
    "base_old_schema": {"index.json": json.dumps({"schema": "neuron-eval-baseline/0"})},
    "base_no_tensors": {"index.json": json.dumps({"schema": BASELINE_SCHEMA, "format": "safetensors"})},
    "base_truncated": {
        "index.json": json.dumps({"schema": BASELINE_SCHEMA, "format": "safetensors"}),
        "tensors.safetensors": safetensors(TENSOR, b"\x00" * 8),
    },
    "base_garbage": {
        "index.json": json.dumps({"schema": BASELINE_SCHEMA, "format": "safetensors"}),
        "tensors.safetensors": b"\xff" * 64,
    },
    "base_header_not_json": {
        "index.json": json.dumps({"schema": BASELINE_SCHEMA, "format": "safetensors"}),
        "tensors.safetensors": struct.pack("<Q", 4) + b"{{{{" + b"\x00" * 16,
    },
    "base_no_offsets": {
        "index.json": json.dumps({"schema": BASELINE_SCHEMA, "format": "safetensors"}),
        "tensors.safetensors": safetensors({"w": {"dtype": "F32"}}, b"\x00" * 16),
    },
    "full": {"something": "x"},
}

EVAL = ["--device", "cpu", "--model", MODEL]


def unwritable(label: str, argv: list[str], flag: str, leaf: str) -> list[Case]:
    """`flag` (an output path) in each of the three places nobody can write (the module's docstring says why)."""
    return [
        Case(f"{label} read-only", [*argv, flag, f"/sys/kernel/{leaf}"], "cannot write in /sys/kernel"),
        Case(f"{label} in /proc", [*argv, flag, f"/proc/{leaf}"], "cannot write in /proc"),
        Case(f"{label} under a file", [*argv, flag, f"{{file}}/{leaf}"], "is a file, so"),
    ]


def values(label: str, argv: list[str], rows: tuple[tuple[str, str, str], ...]) -> list[Case]:
    """One case per (name, value, message): `argv` ending in the option, given that value."""
    return [Case(f"{label} {name}", [*argv, value], message) for name, value, message in rows]


CASES: list[Case] = [
    # options
    Case("unknown option", ["--bogus"], "unrecognized arguments: --bogus", ARGPARSE),
    Case("device bogus", ["--device", "tpu"], "invalid choice: 'tpu'", ARGPARSE),
    Case("launcher bogus", ["--launcher", "mpirun"], "invalid choice: 'mpirun'", ARGPARSE),
    Case("timeout zero", ["--timeout", "0"], "must be a number of seconds over 0 and at most", ARGPARSE),
    Case("timeout huge", ["--timeout", "1e308"], "at most 604800 (a week): 1e308", ARGPARSE),  # was an OverflowError
    Case("timeout text", ["--timeout", "soon"], "invalid", ARGPARSE),
    Case("iterations zero", ["--iterations", "0"], "must be > 0: 0", ARGPARSE),
    Case("expected devices negative", ["--expected-devices", "-1"], "must be > 0: -1", ARGPARSE),
    Case("peak tflops zero", ["--peak-tflops", "0"], "must be a finite number > 0", ARGPARSE),
    Case("full tensor limit zero", ["--full-tensor-limit", "0"], "must be > 0", ARGPARSE),
    Case("stages unknown", ["--stages", "matmul,bogus"], "--stages: unknown stage(s) bogus"),
    Case("stages long", ["--stages", LONG], "--stages: unknown stage(s)"),
    Case("stages empty", ["--stages", ""], "argument --stages: is empty", ARGPARSE),  # ran nothing, exit 0
    Case("stages commas", ["--stages", " , "], "--stages: no stage named"),
    # an empty value is refused, not taken as the option left out (no pins checked) or '' as a Path (this folder)
    Case("cell empty", ["--cell", ""], "argument --cell: is empty", ARGPARSE),
    Case("cell file named empty", ["--cell-file="], "argument --cell-file: is empty", ARGPARSE),
    Case("model empty", ["--model", ""], "argument --model: is empty", ARGPARSE),
    Case("record empty", ["--record", "", "--model", "m:f"], "argument --record: is empty", ARGPARSE),
    Case("report empty", ["--report", " "], "argument --report: is empty", ARGPARSE),
    Case("nproc one", ["--nproc", "1"], "--nproc must be at least 2"),
    # an instance type the release refuses (it was noted as "expected device count unknown")
    Case("instance trn1", ["--instance-type", "trn1.32xlarge"], "--instance-type: instance type trn1.32xlarge is not"),
    Case("instance typo", ["--instance-type", "trn2.48xlage"], "'48xlage' is not an EC2 instance size"),
    Case("instance other", ["--instance-type", "p5.48xlarge"], "supported families: trn2, trn3"),
    Case("throughput size huge", ["--throughput-size", "10000000"], "inputs need 745,058.1 GiB, more than this host"),
    Case(
        "allreduce size huge",
        ["--nnodes", "2", "--node-rank", "0", "--master", "127.0.0.1:29500", "--allreduce-max-bytes", "10" + "0" * 14],
        "--allreduce-max-bytes 1000000000000000: 931,322.6 GiB, more than this host's",  # was the allocator's error
    ),
    Case("floor 100", ["--throughput-floor", "100"], "--throughput-floor must be a percentage"),
    Case("floor negative", ["--throughput-floor", "-1"], "--throughput-floor must be a percentage"),
    # the cell file
    *values(
        "cell file",
        ["--cell-file"],
        (
            ("binary", "{binary}", "not UTF-8 text"),
            ("NUL", "{nul}", "holds NUL bytes"),
            ("missing", "{missing}", "{missing}: no such cell file; pass a cell record"),
            ("folder", "{folder}", "{folder}: is a folder, not a cell file"),
            ("device", "/dev/zero", "is not a regular file"),
            ("empty", "{empty}", "the cell file is empty"),
            ("not JSON", "{not_json}", "not JSON"),
            ("a list", "{a_list}", "cell file"),
            ("old schema", "{old_schema}", "schema"),
        ),
    ),
    Case("cell file other cell", ["--cell-file", "{cell}", "--cell", "2.14-py3.14-ubuntu26.04"], "does not match"),
    Case(
        "cell without CLI",
        ["--cell", "2.13-py3.11-ubuntu24.04"],
        "the neuron-torch CLI is not on PATH",
        env={"PATH": "{folder}"},
    ),
    # output paths, checked before torch
    *unwritable("report", [], "--report", "r.json"),
    *unwritable("junit", [], "--junit", "j.xml"),
    *unwritable("record", EVAL, "--record", "base"),
    *unwritable("eval report", [*EVAL, "--shapes", "1x4"], "--eval-report", "e"),
    Case("report a folder", ["--report", "{folder}"], "--report {folder} is a folder"),
    Case("junit a folder", ["--junit", "{folder}"], "--junit {folder} is a folder"),
    Case("report is junit", ["--report", "{out}", "--junit", "{out}"], "give each its own file"),
    # the JUnit XML and the node's JSON report were written to one file, the last one kept
    Case("junit is the node report", [*NODE_1, "--junit", "{out}/node-1.json"], "--junit {out}/node-1.json is this"),
    # a device was replaced by a regular file (/dev/stdout as root), "-" written as a file named "-"
    Case("report a device", ["--report", "/dev/null"], "--report /dev/null is a character device, not a file"),
    Case("junit stdout", ["--junit", "-"], "--junit -: names a file, not standard output"),
    Case("record a file", [*EVAL, "--record", "{file}"], "--record {file} is a file"),
    Case("record not a baseline", [*EVAL, "--record", "{full}"], "exists and is not a baseline directory"),
    Case("eval report a file", [*EVAL, "--shapes", "1x4", "--eval-report", "{file}"], "is a file; --eval-report"),
    Case("eval report alone", ["--eval-report", "{out}"], "--eval-report DIR goes with --record"),
    # the evaluation's inputs
    Case("record and baseline", [*EVAL, "--record", "{out}", "--baseline", "{out}"], "record a baseline first"),
    Case("shapes without model", ["--device", "cpu", "--shapes", "1x4"], "need --model"),
    # an option of the evaluation, or of the multi-node mode, is refused where it does nothing (it was ignored)
    Case("precision without evaluation", ["--precision", "fp32"], "--precision goes with --record, --baseline"),
    Case("fail-on without evaluation", ["--fail-on", "compile"], "--fail-on goes with --record, --baseline"),
    Case("tensor limit without evaluation", ["--full-tensor-limit", "5"], "--full-tensor-limit goes with"),
    Case("sweep steps without shapes", [*EVAL, "--record", "{out}", "--sweep-steps", "3"], "--sweep-steps goes with"),
    Case("local addr on one host", ["--local-addr", "10.0.0.1"], "--local-addr goes with the multi-node mode"),
    Case("join timeout on one host", ["--join-timeout", "60"], "--join-timeout goes with the multi-node mode"),
    *values(
        "shapes",
        [*EVAL, "--shapes"],
        (
            ("huge", "1x99999999999", "has more elements than"),
            ("digits", "1x" + "9" * 5000, "(5002 characters)"),
            ("no dims", "8x", "is not a shape like 8x128"),
            ("zero", "8x0", "has a dimension <= 0"),
            ("none", ",", "give at least one shape"),
        ),
    ),
    *values(
        "baseline",
        [*EVAL, "--baseline"],
        (
            ("missing", "{missing}", "no index.json there"),
            ("no index", "{base_no_index}", "no index.json there"),
            ("bad index", "{base_bad_index}", "baseline index"),
            ("old schema", "{base_old_schema}", "'neuron-eval-baseline/0', expected"),
            ("no tensors", "{base_no_tensors}", "tensors.safetensors is missing"),
            ("truncated", "{base_truncated}", "is truncated (78 of 86 bytes)"),
            ("garbage", "{base_garbage}", "is no safetensors file"),
            ("header", "{base_header_not_json}", "its header is not JSON"),
            ("offsets", "{base_no_offsets}", "tensor 'w' has no data offsets"),
        ),
    ),
    # environment variables, validated as the flags they stand for
    Case("SMOKE_DEVICE garbage", [], "NEURON_SMOKE_DEVICE='garbage'", env={"NEURON_SMOKE_DEVICE": "garbage"}),
    Case("SMOKE_DEVICE long", [], "(5000 characters)", env={"NEURON_SMOKE_DEVICE": LONG}),
    Case("SMOKE_IMDS", ["--device", "cpu"], "NEURON_SMOKE_IMDS='off'", env={"NEURON_SMOKE_IMDS": "off"}),
    Case("SMOKE_CONTAINER", ["--device", "cpu"], "NEURON_SMOKE_CONTAINER='yes'", env={"NEURON_SMOKE_CONTAINER": "yes"}),
    Case(
        "CELL_FILE missing",
        ["--device", "cpu"],
        "cell file ($NEURON_TORCH_CELL_FILE)",
        env={"NEURON_TORCH_CELL_FILE": "{missing}"},
    ),
    Case("CELL_FILE binary", ["--device", "cpu"], "not UTF-8", env={"NEURON_TORCH_CELL_FILE": "{binary}"}),
    Case("CELL_FILE folder", ["--device", "cpu"], "is a folder", env={"NEURON_TORCH_CELL_FILE": "{folder}"}),
    Case(
        "DEFAULT_CELL_FILE binary", ["--device", "cpu"], "not UTF-8", env={"NEURON_SMOKE_DEFAULT_CELL_FILE": "{binary}"}
    ),
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("verify-inputs")
    for name, content in FILES.items():
        if isinstance(content, dict):
            (root / name).mkdir()
            for file, data in content.items():
                written(root / name / file, data)
        else:
            written(root / name, content)
    (root / "folder").mkdir()
    return root


def snapshot(*folders: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for f in folders for p in sorted(f.rglob("*")) if p.is_file()}


def test_there_are_at_least_fifty_cases() -> None:
    assert len(CASES) >= 50
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_refused_before_torch(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, inputs: Path, tmp_path: Path, case: Case
) -> None:
    for name in ("NEURON_SMOKE_DEVICE", "NEURON_SMOKE_IMDS", "NEURON_SMOKE_CONTAINER", "NEURON_TORCH_CELL_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NEURON_SMOKE_DEFAULT_CELL_FILE", str(tmp_path / "no-default-cell.json"))
    for name in ("tmp", "state"):
        (tmp_path / name).mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("COLUMNS", "200")

    def past_validation(device: str, nproc: int) -> None:
        raise AssertionError("verify-device got past its validation (the next step imports torch)")

    monkeypatch.setattr(cores, "prepare_before_torch", past_validation)
    names = {p.name: str(p) for p in inputs.iterdir()}
    names |= {"missing": str(tmp_path / "missing"), "out": str(tmp_path / "out")}
    for key, value in case.env.items():
        monkeypatch.setenv(key, value.format(**names))
    args = [arg.format(**names) if "{" in arg else arg for arg in case.argv]
    before = snapshot(inputs, tmp_path)
    try:
        code = cli.main(args)
    except SystemExit as exit_:  # argparse's own usage errors
        code = int(exit_.code or 0)
    out = capsys.readouterr()
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert code == 2, out.err
    assert case.message.format(**names) in out.err, out.err
    assert "Traceback" not in out.out + out.err
    assert len(lines) == case.lines, out.err
    assert all(len(line) <= 1200 for line in lines), "user data is quoted at most 200 characters"
    assert snapshot(inputs, tmp_path) == before
    assert not (tmp_path / "out").exists()
    assert not any((tmp_path / "tmp").iterdir()) and not any((tmp_path / "state").iterdir())


def running(report: Path, name: str) -> bool:
    """Whether the report on disk has stage `name` running (written as hung until it ends)."""
    try:
        stages = json.loads(report.read_text())["stages"]
    except (OSError, ValueError):
        return False
    return any(stage["name"] == name and stage["hung"] for stage in stages)


def test_ctrl_c_is_one_line_exit_130_and_the_report_says_interrupted(tmp_path: Path) -> None:
    """A real CPU run, long enough to be interrupted in a stage (a throughput of many iterations): SIGINT once the
    first report is on disk; the report then names the stage that was running as interrupted, none as hung."""
    report = tmp_path / "report.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "NEURON_SMOKE_IMDS": "0",
        "TMPDIR": str(tmp_path),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    command = [sys.executable, "-m", "neuron_smoke", "--device", "cpu", "--report", str(report)]
    command += ["--stages", "environment,device,matmul,throughput", "--throughput-size", "512"]
    command += ["--iterations", "1000000", "--timeout", "300"]
    process = subprocess.Popen(
        command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while not running(report, "throughput"):  # in the stage: Ctrl-C between stages interrupts none of them
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "verify-device never wrote the report of its throughput stage running"
        time.sleep(0.05)
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert [line for line in err.splitlines() if line.strip()] == [
        "verify-device: interrupted (Ctrl-C); a --report written so far marks the run as interrupted"
    ]
    data = json.loads(report.read_text())
    assert data["interrupted"] is True and data["exit_code"] == 130
    assert not any(stage["hung"] for stage in data["stages"])
    stopped = [s for s in data["stages"] if any("interrupted (Ctrl-C)" in f for f in s["failures"])]
    assert [s["name"] for s in stopped] == ["throughput"], data["stages"]
    assert "hung" not in report.read_text().replace('"hung": false', "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_an_unexpected_error_is_one_line_naming_its_log(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def broken() -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(validate, "check_environment", broken)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert cli.main(["--device", "cpu"]) == 1
    err = capsys.readouterr().err
    logs = list((tmp_path / "verify-device").iterdir())
    assert len(logs) == 1 and err.strip() == (
        f"verify-device: internal error: KeyError: \"'a bug'\"; the traceback is in {logs[0]} (please attach it to an "
        "issue)"
    )
    assert ", in broken" in logs[0].read_text()
