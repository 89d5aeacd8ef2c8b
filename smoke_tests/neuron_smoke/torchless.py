"""When the Python running verify-device cannot import torch (a broken environment, or the wrong Python): the
environment stage fails saying so, every other stage is skipped, and the summary, --report and --junit are written
as for any other failed run."""

from __future__ import annotations

import datetime
import platform
import sys

from neuron_smoke import EXIT_CHECK_FAILED
from neuron_smoke.context import Options
from neuron_smoke.host import host_facts
from neuron_smoke.registry import TABLE
from neuron_smoke.results import FAIL, SCHEMA, Report, StageResult


def report_for(options: Options, error: ImportError) -> Report:
    message = (
        f"{sys.executable} cannot import torch ({error}). Run verify-device with the Python of the environment that "
        "holds torch: NEURON_TORCH_PYTHON=/path/to/venv/bin/python verify-device ..."
    )
    stages = [
        StageResult(s.name, s.title, status=FAIL, failures=[message])
        if s.name == "environment"
        else StageResult(s.name, s.title, reason="skipped: torch is not importable")
        for s in TABLE
    ]
    return Report(
        schema=SCHEMA,
        started=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        host=host_facts(),
        versions={"python": platform.python_version(), "torch": "not importable"},
        device={"requested": options.device, "backend": options.device},
        options={"device": options.device, "stages": list(options.stages)},
        stages=stages,
        exit_code=EXIT_CHECK_FAILED,
    )
