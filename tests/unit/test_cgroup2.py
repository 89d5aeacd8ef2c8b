"""tests/testbed/cgroup2.py without mounting anything: the mount check, the names it takes, the removal's order."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.testbed import cgroup2


def test_a_folder_that_is_no_cgroup2_mount_is_not_taken_for_one(tmp_path: Path) -> None:
    assert not cgroup2.mounted(tmp_path)
    assert not cgroup2.mounted(Path("/proc"))  # a mount point, of another file system


@pytest.mark.parametrize("name", ["", "../escape", "a/b", ".hidden"])
def test_only_a_container_name_is_a_subfolder_name(name: str, tmp_path: Path) -> None:
    with pytest.raises(cgroup2.Cgroup2Error, match="not a host's cgroup name"):
        cgroup2.remove(name, tmp_path)


def test_remove_takes_the_cgroups_inside_deepest_first_and_names_what_it_could_not(tmp_path: Path) -> None:
    (tmp_path / "host" / "system.slice" / "ssh.service").mkdir(parents=True)
    (tmp_path / "host" / "init.scope").mkdir()
    cgroup2.remove("host", tmp_path)
    assert list(tmp_path.iterdir()) == []
    cgroup2.remove("host", tmp_path)  # gone already: nothing to do
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "cgroup.procs").write_text("1\n")  # a cgroup with a process cannot be removed; nor this
    with pytest.raises(cgroup2.Cgroup2Error, match=r"busy could not be removed in 0 s"):
        cgroup2.remove("busy", tmp_path, timeout=0.3)
