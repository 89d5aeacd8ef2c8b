from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from neuron_torch.matrix import Matrix, load_matrix
from neuron_torch.render import rendered
from tests import REPO_ROOT as REPO

# Shared helpers that assert, for the tests of more than one file: pytest explains their failures as it does a test's.
pytest.register_assert_rewrite(
    "tests.unit.neuron_smoke.examples._transformers",
)


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


# --- lanes: how scripts/test.sh runs the files side by side (pytest-xdist, 3 workers) --------------------------------
# Each file is one unit of work, run whole by one worker (its module fixtures are built once), except files that share
# a resource no two processes may use at once; those are one unit:
# - test_image, test_field_check, test_publish and test_bom: the test cell's image `neuron-torch:<cell>` (+ `:latest`)
#   and its build context build/image/<cell>-<digest>/, which they rewrite (the image fixture; field-check's `build
#   image`) or push and read (publish, the bill of materials).
# - smoke test_faults and test_verify_device: the session's whole clean run on the simulated device (clean_sim_run),
#   made once in the worker that runs both.
# Everything else two workers may share is safe side by side: the test bed's build takes a file lock and rewrites no
# file it already holds (tests/testbed/filelock.py), container names and SSH ports are per run (uuid prefixes, free
# ports), tmp_path is per worker, the simulated device's build is locked by torch. A new file that writes a fixed
# path or image tag another file also writes joins that file's unit here.
SHARED = {
    "tests/integration/test_image.py": "image",
    "tests/integration/test_field_check.py": "image",
    "tests/integration/test_publish.py": "image",
    "tests/integration/test_bom.py": "image",
    "tests/integration/smoke/test_faults.py": "smoke-clean-run",
    "tests/integration/smoke/test_verify_device.py": "smoke-clean-run",
}
# Seconds each unit took with 3 workers on the 2-core machine in a clean-clone CI run (1383 s; the "lanes" summary
# of scripts/test.sh), only to start the longest first: an unlisted file counts as quick. Wrong numbers cost time,
# never correctness.
SECONDS = {
    "tests/integration/test_fleet.py": 760,
    "tests/integration/test_molecule.py": 720,
    "tests/integration/test_packer.py": 639,
    "smoke-clean-run": 630,
    "image": 437,
    "tests/integration/test_quickstart.py": 250,
    "tests/integration/smoke/test_evaluate.py": 136,
    "tests/integration/test_ansible.py": 114,
    "tests/integration/smoke/test_cluster.py": 120,
    "tests/integration/smoke/test_cluster_sim.py": 40,
    "tests/integration/smoke/test_evaluate_parity.py": 60,
    "tests/integration/smoke/test_fault_location.py": 30,
    "tests/integration/test_slurm.py": 117,
    "tests/integration/test_fleet_cluster.py": 60,
    "tests/integration/test_pip_tools.py": 77,
    "tests/integration/smoke/test_runtime_rules.py": 69,
    "tests/integration/smoke/test_shared_cache.py": 60,
    "tests/integration/test_bad_inputs.py": 47,
    "tests/integration/test_release_bump.py": 45,
    "tests/integration/test_lock.py": 40,
    "tests/integration/test_lock_gate.py": 32,
    "tests/integration/test_bundle.py": 26,
    "tests/integration/smoke/test_registry.py": 26,
    "tests/integration/test_install.py": 21,
    "tests/unit/neuron_smoke/evaluate/test_evaluate.py": 19,
    "tests/integration/smoke/test_launchers.py": 17,
    "tests/integration/test_testbed_secrets.py": 16,
}


def lane_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or the shared unit its file is in."""
    path = nodeid.split("::", 1)[0]
    return SHARED.get(path, path)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's loadscope scheduling with lane_unit as the scope: a unit goes whole to one worker, the next unit in
    collection order to the first worker that runs low. (Its loadgroup mode cannot be used: it renames node ids,
    which pytest 9.2 no longer allows.)"""
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return lane_unit(nodeid)

    config.option.loadscopereorder = False  # keep the order below, longest first, not xdist's by test count
    return LaneScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker (whose collection the scheduler takes in order): the longest units first."""
    if not hasattr(config, "workerinput"):
        return
    order = {id(item): index for index, item in enumerate(items)}
    items.sort(key=lambda i: (-SECONDS.get(lane_unit(i.nodeid), 0), lane_unit(i.nodeid), order[id(i)]))


_unit_seconds: dict[tuple[str, str], float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = getattr(report, "node", None)  # the worker that ran it (xdist's controller only)
    if node is not None:
        key = (node.gateway.id, lane_unit(report.nodeid))
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
