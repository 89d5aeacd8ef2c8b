from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from neuron_torch.matrix import Matrix, load_matrix
from neuron_torch.render import rendered

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def matrix() -> Matrix:
    return load_matrix(REPO / "constraints" / "matrix.toml")


@pytest.fixture
def release_copy(tmp_path: Path) -> Path:
    """A copy of the release (the matrix and every file rendered from it) to edit without touching the checkout."""
    shutil.copytree(REPO / "constraints", tmp_path / "constraints", ignore=shutil.ignore_patterns("locks"))
    for path in rendered(load_matrix(REPO / "constraints" / "matrix.toml")):
        target = tmp_path / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return tmp_path


# --- lanes: how scripts/test.sh runs the files side by side (pytest-xdist, --dist loadgroup) --------------------------
# Each file is one unit of work, run whole by one worker (its module fixtures are built once), except files that share
# a resource no two processes may use at once; those are one unit:
# - test_image and test_field_check: the test cell's image `neuron-torch:<cell>` (+ `:latest`) and its build context
#   build/image/<cell>-<digest>/, which both rewrite (the image fixture; field-check's `build image`).
# - smoke test_faults and test_verify_device: the session's whole clean run on the simulated device (clean_sim_run),
#   made once in the worker that runs both.
# Everything else two workers may share is safe side by side: the test bed's build takes a file lock and rewrites no
# file it already holds (tests/testbed/cache.py), base images are built under a lock, container names and SSH ports
# are per run (uuid prefixes, free ports), tmp_path is per worker, the simulated device's build is locked by torch.
# A new file that writes a fixed path or tag another file also writes joins that file's group here.
SHARED = {
    "tests/test_image.py": "image",
    "tests/test_field_check.py": "image",
    "tests/smoke/test_faults.py": "smoke-clean-run",
    "tests/smoke/test_verify_device.py": "smoke-clean-run",
}
# Seconds each unit took in the last CI run (pytest --durations=0), only to start the longest first: an unlisted file
# counts as quick. Wrong numbers cost time, never correctness.
SECONDS = {
    "tests/test_ansible.py": 480,
    "tests/test_fleet.py": 360,
    "smoke-clean-run": 330,
    "tests/test_packer.py": 250,
    "image": 200,
    "tests/smoke/test_evaluate.py": 140,
    "tests/test_pip_tools.py": 90,
    "tests/test_quickstart.py": 60,
    "tests/smoke/test_runtime_rules.py": 50,
    "tests/test_testbed.py": 40,
    "tests/smoke/test_launchers.py": 30,
    "tests/test_release_bump.py": 25,
    "tests/test_install.py": 20,
    "tests/test_testbed_secrets.py": 20,
    "tests/test_traits.py": 20,
}


def lane_group(item: pytest.Item) -> str:
    path = Path(str(item.path)).relative_to(REPO).as_posix()
    return SHARED.get(path, path)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker: mark each test with its unit (xdist_group) and put the longest units first (test.sh passes
    --no-loadscope-reorder, so the workers take them in this order)."""
    if not hasattr(config, "workerinput"):
        return
    order = {id(item): index for index, item in enumerate(items)}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(lane_group(item)))
    items.sort(key=lambda item: (-SECONDS.get(lane_group(item), 0), lane_group(item), order[id(item)]))


_unit_seconds: dict[tuple[str, str], float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = getattr(report, "node", None)  # the worker that ran it (xdist's controller only)
    if node is not None:
        key = (node.gateway.id, report.nodeid.rpartition("@")[2] if "@" in report.nodeid else report.nodeid)
        _unit_seconds[key] = _unit_seconds.get(key, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Per worker: its units and their seconds (setup, call and teardown of each test), the numbers that balance the
    lanes (SECONDS above)."""
    if not _unit_seconds:
        return
    terminalreporter.section("lanes (seconds per worker and unit)")
    for worker in sorted({w for w, _ in _unit_seconds}):
        units = sorted(((s, u) for (w, u), s in _unit_seconds.items() if w == worker), reverse=True)
        shown = ", ".join(f"{u} {s:.0f}" for s, u in units if s >= 5)
        terminalreporter.write_line(f"{worker}: {sum(s for s, _ in units):.0f} s: {shown}")
