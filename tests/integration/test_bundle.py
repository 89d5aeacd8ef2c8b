"""`neuron-torch bundle`: an offline bundle of a test cell holds what its lock and the apt pins name, the smoke
tests and the cell record; tampering is refused. The README's path D as written (install.sh with the network off on
the Ubuntu 26.04 twin with the AMI's traits, then verify-device) is test_quickstart.py's, on fixture torch; here the
debian12 cell's bundle, the test release's one cell with the real CPU torch, is installed offline on a fresh Debian
12 container and its verify-device passes every stage on the CPU."""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_cell.cellrecord import PINNED
from neuron_torch.bundle import make_bundle, pip_platforms
from neuron_torch.cli import main
from neuron_torch.errors import NeuronTorchError
from neuron_torch.mirror import apply_mirror, load_mirror
from tests import REPO_ROOT
from tests.testbed.harness import CELL, TEST_MATRIX, built_testbed
from tests.testbed.traits import labelled
from tests.testbed.wheels import FixtureWheel, build_wheel

BUNDLE = REPO_ROOT / ".testbed" / "bundles" / CELL


@functools.cache
def bundle() -> Path:
    """The debian12 cell's bundle, made through the CLI with the test bed's mirror settings (once per session)."""
    bed = built_testbed()
    shutil.rmtree(BUNDLE, ignore_errors=True)
    argv = [
        "--matrix",
        str(TEST_MATRIX),
        "bundle",
        "--cell",
        CELL,
        "--out",
        str(BUNDLE),
        "--mirror",
        str(bed.mirror_file),
    ]
    assert main(argv) == 0
    return BUNDLE


def test_pip_platforms_cover_older_manylinux() -> None:
    tags = pip_platforms("x86_64-manylinux_2_36")
    assert tags[0] == "manylinux_2_36_x86_64" and "manylinux_2_28_x86_64" in tags and "manylinux2014_x86_64" in tags


def test_bundle_holds_the_lock_the_debs_and_their_sums() -> None:
    out = bundle()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["cell"] == CELL
    assert {p["name"] for p in manifest["apt"]["packages"]} == {
        "aws-neuronx-runtime-lib", "aws-neuronx-collectives", "aws-neuronx-tools",
    }  # fmt: skip
    assert manifest["apt"]["key_fingerprint"] == built_testbed().fingerprint
    wheels = {w["name"]: w["version"] for w in manifest["wheels"]}
    assert wheels["torch"] == "2.13.0+cpu" and wheels["torch-neuronx"] == "2.13.3.0.1871"
    check = subprocess.run(["sha256sum", "--quiet", "--strict", "-c", "SHA256SUMS"], cwd=out)
    assert check.returncode == 0
    # The machine's CA never travels: no certificate file, and none inside the bundle's own files (wheels and debs
    # are the packages' own, certifi's CA bundle among them).
    loose = [p for p in out.rglob("*") if p.is_file() and p.suffix not in {".whl", ".deb"}]
    assert not [p for p in loose if p.suffix in {".pem", ".crt"}]
    assert not [p for p in loose if b"-----BEGIN CERTIFICATE-----" in p.read_bytes()]
    listed = {line.split("  ", 1)[1] for line in (out / "SHA256SUMS").read_text().splitlines()}
    assert {"cell.json", "neuron_smoke/__main__.py", "neuron_smoke/registry.py", "neuron_cell/lockinstall.py"} <= listed
    assert json.loads((out / "cell.json").read_text())["id"] == CELL


def test_the_bundle_installs_offline_and_its_verify_device_passes_on_real_torch() -> None:
    """install.sh as root (path D's `sudo`) with the network off on a fresh container of the Debian 12 base (python3
    with its venv module, as path D asks), then the installed verify-device on the CPU: every computed stage passes
    against the installed cell record, with the bundle's torch. Then install.sh again from another folder with
    relative --venv and --prefix (the venv made above, under another name, so nothing is installed twice): they are
    that folder's, not the bundle's (a read-only mount here), and its verify-device runs from anywhere."""
    out = bundle()
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "info"], capture_output=True).returncode != 0:
        pytest.skip("docker is not available")
    base = json.loads((out / "manifest.json").read_text())["os"]["base_image"]
    script = "nt-bundle/install.sh > /tmp/install.log 2>&1 || { tail -20 /tmp/install.log; exit 9; }; " \
        "/opt/neuron-venv/bin/verify-device --device cpu && ln -s /opt/neuron-venv /tmp/rel && cd /tmp && " \
        "/root/nt-bundle/install.sh --no-apt --venv rel --prefix pre > /tmp/rel.log 2>&1 " \
        "|| { tail -20 /tmp/rel.log; exit 8; }; cd / && /tmp/rel/bin/verify-device --device cpu --stages environment " \
        "--report /tmp/rel.json && grep -q '/tmp/pre/smoke_tests' /tmp/rel/bin/verify-device"  # fmt: skip
    mount = ["-v", f"{out}:/root/nt-bundle:ro", "-w", "/root"]
    result = subprocess.run(
        [docker, "run", "--rm", "--network", "none", *mount, base, "sh", "-c", script],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    for stage in ("environment", "device", "matmul", "model", "compile", "collectives"):
        assert re.search(rf"PASS +{stage} ", output), (stage, output[-6000:])
    assert f"cell {CELL}: {len(PINNED)} pins checked, 0 mismatched" in output, output[-6000:]


def test_a_wheel_whose_hash_differs_from_the_lock_is_refused(tmp_path: Path) -> None:
    out = bundle()
    wheels = tmp_path / "wheels"
    nki = labelled("nki", "0.7.0")
    tampered = build_wheel(FixtureWheel("nki", nki, module_source="TAMPERED = True\n"), wheels)
    assert tampered.name in {p.name for p in (out / "wheels").iterdir()}
    locked = [line for line in (out / "lock.txt").read_text().splitlines()]
    start = locked.index(f"nki=={nki} \\")
    requirement = tmp_path / "req.txt"
    requirement.write_text("\n".join(locked[start : start + 2]).rstrip("\\") + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(wheels), "--require-hashes",
         "--no-deps", "--target", str(tmp_path / "target"), "-r", str(requirement)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode != 0
    assert "DO NOT MATCH THE HASHES" in result.stderr


def test_a_key_with_another_fingerprint_is_refused(tmp_path: Path) -> None:
    bed = built_testbed()
    settings = tmp_path / "mirror.toml"
    settings.write_text(bed.mirror_file.read_text().replace(bed.fingerprint, "0" * 40))
    matrix = apply_mirror(bed.matrix, load_mirror(settings))
    with pytest.raises(NeuronTorchError, match="not the pinned 0000"):
        make_bundle(matrix, matrix.cell(CELL), tmp_path / "bundle")
