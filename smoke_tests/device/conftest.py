"""`pytest smoke_tests/device`: the stages as tests on this machine. The device comes from NEURON_SMOKE_DEVICE (default
neuron); any other verify-device options from NEURON_SMOKE_ARGS (e.g. "--cell-file /etc/neuron-torch/cell.json")."""

from __future__ import annotations

import os
import shlex
import sys
import warnings
from pathlib import Path

import pytest

# The harness package sits one folder up; this suite must not need it installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

from neuron_smoke import models  # noqa: E402
from neuron_smoke.cli import parse_options  # noqa: E402
from neuron_smoke.results import Report  # noqa: E402
from neuron_smoke.suite import collectives_launcher, run_suite  # noqa: E402


@pytest.fixture(scope="session")
def smoke_report() -> Report:
    options, _ = parse_options(shlex.split(os.environ.get("NEURON_SMOKE_ARGS", "")))
    with collectives_launcher(options) as launcher:  # before the model factory runs or a device is touched
        return run_suite(options, models.load(options.model), lambda result: None, launcher)
