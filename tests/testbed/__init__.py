"""The hermetic test bed (docs/testbed.md)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def folder() -> Path:
    """Where the bed is built and served from: $NEURON_TORCH_TESTBED_DIR (a second bed, or one shared by worktrees),
    else `.testbed/` of this checkout."""
    return Path(os.environ.get("NEURON_TORCH_TESTBED_DIR") or ROOT / ".testbed")
