"""The readable summary, the JSON report and the JUnit XML."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TextIO

from neuron_cell.outputs import write_whole
from neuron_smoke.results import FAIL, PASS, SKIP, Report, StageResult

LABEL = {PASS: "PASS", FAIL: "FAIL", SKIP: "SKIP"}


def print_stage(result: StageResult, stream: TextIO = sys.stdout) -> None:
    timing = f"{result.duration_s:7.2f}s" if result.status != SKIP else " " * 8
    print(f"  {LABEL[result.status]}  {result.name:<12} {timing}  {result.message()}", file=stream, flush=True)
    extra = result.failures[1:] if result.status == FAIL else []
    for line in [*extra, *result.notes]:
        print(f"{'':27}- {line}", file=stream, flush=True)


def print_header(report_device: str, backend: str, torch_version: str, stream: TextIO = sys.stdout) -> None:
    print(f"neuron-smoke: device {backend} (requested {report_device}), torch {torch_version}", file=stream, flush=True)


def print_footer(report: Report, stream: TextIO = sys.stdout) -> None:
    c = report.counts()
    print(
        f"result: {c[PASS]} passed, {c[FAIL]} failed, {c[SKIP]} skipped in {report.duration_s:.1f}s "
        f"-> exit {report.exit_code}",
        file=stream,
        flush=True,
    )
    missing = [s for s in report.stages if s.device_missing]
    if missing:
        print(f"the requested device is not present: {missing[0].message()}", file=stream, flush=True)


def write_json(report: Report, path: Path) -> None:
    """Whole or not at all (neuron_cell.outputs.write_whole): the report is rewritten after every stage, and a reader,
    or the watchdog's exit, must never see half a file."""
    write_whole(path, (json.dumps(report.to_dict(), indent=2, sort_keys=False, default=str) + "\n").encode())


def write_junit(report: Report, path: Path) -> None:
    counts = report.counts()
    suite = ET.Element(
        "testsuite",
        name="neuron-smoke",
        tests=str(len(report.stages)),
        failures=str(counts[FAIL]),
        skipped=str(counts[SKIP]),
        errors="0",
        time=f"{report.duration_s:.3f}",
        timestamp=report.started,
        hostname=str(report.host.get("hostname", "")),
    )
    for stage in report.stages:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"neuron_smoke.{report.device['backend']}",
            name=stage.name,
            time=f"{stage.duration_s:.3f}",
        )
        if stage.status == FAIL:
            failure = ET.SubElement(case, "failure", message=stage.message()[:500])
            failure.text = "\n".join([*stage.failures, stage.error or ""]).strip()
        elif stage.status == SKIP:
            ET.SubElement(case, "skipped", message=stage.reason)
        out = ET.SubElement(case, "system-out")
        out.text = json.dumps({"numbers": stage.numbers, "notes": stage.notes}, default=str)
        if stage.hung:
            case.set("hung", "true")
    write_whole(path, ET.tostring(suite, encoding="utf-8", xml_declaration=True))
