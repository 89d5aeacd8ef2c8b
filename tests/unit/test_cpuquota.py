"""tests/testbed/cpuquota.py on a folder laid out as the cgroup v1 cpu hierarchy, and on the real one where it can."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.testbed import cpuquota


def hierarchy(root: Path) -> Path:
    (root / "cpu.cfs_quota_us").write_text("-1\n")
    return root


def test_a_group_gets_its_quota_from_the_period_and_is_removed(tmp_path: Path) -> None:
    root = hierarchy(tmp_path)
    (root / "neuron-torch-bench-node0").mkdir()  # a group left by a run that was killed is replaced
    # A real group's files appear when it is made; a plain folder has none, so write the period as the kernel does.
    original_mkdir = Path.mkdir

    def mkdir_with_period(self: Path, *args: object, **kwargs: object) -> None:
        original_mkdir(self)
        (self / "cpu.cfs_period_us").write_text("100000\n")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "mkdir", mkdir_with_period)
        group = cpuquota.make("node0", 0.5, root)
    assert (group / "cpu.cfs_quota_us").read_text() == "50000\n"
    for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us"):
        (group / name).unlink()
    (group / "cgroup.procs").touch()  # a group with a process in it (here: any file) cannot be removed
    with pytest.raises(cpuquota.QuotaError, match="still has processes"):
        cpuquota.remove(group, timeout=0.2)
    (group / "cgroup.procs").unlink()
    cpuquota.remove(group)
    assert not group.exists()


BAD = [("n", 0, "above 0"), ("n", float("nan"), "above 0"), ("a/b", 1, "not a node name"), ("", 1, "not a node name")]


@pytest.mark.parametrize(("name", "cpus", "match"), BAD)
def test_bad_settings_are_refused_with_the_reason(name: str, cpus: float, match: str, tmp_path: Path) -> None:
    with pytest.raises(cpuquota.QuotaError, match=match):
        cpuquota.make(name, cpus, hierarchy(tmp_path))


def test_check_names_what_stops_a_group_being_made(tmp_path: Path) -> None:
    root = hierarchy(tmp_path)
    assert "above 0" in cpuquota.check(0, root)
    assert "no cgroup v1 cpu hierarchy" in cpuquota.check(0.5, tmp_path / "absent")


def test_no_hierarchy_is_named(tmp_path: Path) -> None:
    assert "no cgroup v1 cpu hierarchy" in cpuquota.usable(tmp_path)
    with pytest.raises(cpuquota.QuotaError, match="cannot limit each node's CPUs"):
        cpuquota.make("node0", 1, tmp_path)


@pytest.mark.skipif(bool(cpuquota.usable()), reason=f"no real quota here: {cpuquota.usable()}")
def test_a_process_joins_its_group_on_the_real_hierarchy() -> None:
    group = cpuquota.make(f"unit-{os.getpid()}", 0.25)
    try:
        assert int((group / "cpu.cfs_quota_us").read_text()) == int((group / "cpu.cfs_period_us").read_text()) // 4
        out = subprocess.run(["cat", "/proc/self/cgroup"], preexec_fn=cpuquota.joiner(group), check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
        assert f":cpu:/{group.name}\n" in out or f",cpu:/{group.name}\n" in out or f"cpu,cpuacct:/{group.name}" in out
    finally:
        cpuquota.remove(group)
    assert cpuquota.check(0.25) == "" and not (cpuquota.ROOT / f"{cpuquota.PREFIX}-check").exists()
