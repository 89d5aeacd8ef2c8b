"""neuron_smoke.stage_fabric: the release's provider through a stand-in `fi_info`, and the EFA device count."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from neuron_smoke import release_facts, stage_fabric
from neuron_smoke.backends import CPU
from neuron_smoke.cluster import ClusterSpec
from neuron_smoke.context import Context, Options, StageLog
from neuron_smoke.errors import Skip

LISTING = "provider: efa\n    fabric: efa\n    domain: rdmap16s27-rdm\nprovider: efa\n    domain: rdmap32s27-rdm\n"


def context(instance: str | None = "trn2.48xlarge") -> Context:
    return Context(options=Options(cluster=ClusterSpec(2, 0, "h", 1), instance_type=instance), backend=CPU)


@pytest.fixture
def efa_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A release naming efa (16 devices on trn2.48xlarge), an `fi_info` that lists it, and 16 uverbs files."""
    facts = tmp_path / "facts.json"
    facts.write_text(
        json.dumps({"logical_devices": {}, "fabric": {"provider": "efa", "efa_devices": {"trn2.48xlarge": 16}}})
    )
    monkeypatch.setenv(release_facts.ENV, str(facts))
    release_facts.load.cache_clear()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "fi_info").write_text(f"#!/bin/sh\n[ \"$2\" = efa ] || exit 61\ncat <<'E'\n{LISTING}E\n")
    (bin_dir / "fi_info").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")  # ahead of a real fi_info
    dev = tmp_path / "dev"
    dev.mkdir()
    for i in range(16):
        (dev / f"uverbs{i}").touch()
    monkeypatch.setenv("NEURON_SMOKE_UVERBS_GLOB", str(dev / "uverbs*"))
    return dev


def test_provider_entries() -> None:
    assert stage_fabric.provider_entries(LISTING) == [("efa", "rdmap16s27-rdm"), ("efa", "rdmap32s27-rdm")]
    assert stage_fabric.provider_entries("fi_getinfo: -61") == []


def test_judge_devices() -> None:
    assert stage_fabric.judge_devices(16, "trn2.48xlarge", 16) == ("", "16 EFA device(s), trn2.48xlarge documents 16")
    failure, _ = stage_fabric.judge_devices(15, "trn2.48xlarge", 16)
    assert failure.startswith("15 EFA device(s), trn2.48xlarge documents 16")
    assert stage_fabric.judge_devices(0, "trn2.48xlarge", 16)[0].startswith("no EFA device nodes")
    assert (
        "documents no EFA device count for trn3.48xlarge: presence checked"
        in stage_fabric.judge_devices(4, "trn3.48xlarge", None)[1]
    )


def test_a_single_host_skips() -> None:
    with pytest.raises(Skip, match="single host"):
        stage_fabric.run(Context(options=Options(), backend=CPU), StageLog())


def test_efa_present_with_every_device(efa_host: Path) -> None:
    log = StageLog()
    stage_fabric.run(context(), log)
    assert not log.failures, log.failures
    assert log.numbers["uverbs"] == 16 and log.numbers["domains"] == ["rdmap16s27-rdm", "rdmap32s27-rdm"]


def test_a_missing_efa_device_fails(efa_host: Path) -> None:
    (efa_host / "uverbs15").unlink()
    log = StageLog()
    stage_fabric.run(context(), log)
    assert log.failures[0].startswith("15 EFA device(s), trn2.48xlarge documents 16")


def test_the_provider_absent_fails_naming_it(efa_host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bin" / "fi_info").write_text("#!/bin/sh\necho 'fi_getinfo: -61' >&2\nexit 61\n")
    log = StageLog()
    stage_fabric.run(context(), log)
    assert log.failures[0].startswith("`fi_info -p efa` lists no efa provider (fi_getinfo: -61): EFA is not usable")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    log = StageLog()
    stage_fabric.run(context(), log)
    assert log.failures[0].startswith("fi_info is not on PATH")
