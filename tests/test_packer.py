"""Packer: fmt-clean templates and rendered variables, validation of every cell, refusal of unsupported cells,
and a local docker-source build of the test cell (Ansible provisioner, cleanup last, testinfra with the hygiene
checks on the final state, version-info JSON)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from neuron_torch.cli import main as cli_main
from neuron_torch.errors import NeuronTorchError
from neuron_torch.matrix import Matrix, load_matrix
from neuron_torch.packer import build, fmt_check, is_legacy, packer_version, stage_templates, validate
from neuron_torch.render_packer import cell_var_file, var_file_path
from tests.testbed.fixture_indexes import build_release_indexes

REPO = Path(__file__).resolve().parents[1]
TEST_CELL = "2.13-py3.11-debian12"

needs_packer = pytest.mark.skipif(shutil.which("packer") is None, reason="packer is not installed")


def test_rendered_var_files_hold_every_pin(matrix: Matrix) -> None:
    cell = matrix.cell(matrix.release.default_cell)
    text = cell_var_file(matrix, cell)
    assert var_file_path(matrix, cell) == REPO / "images" / "cells" / f"{cell.id}.pkrvars.hcl"
    assert f'cell_id           = "{cell.id}"' in text
    assert f'source_ami_name   = "{cell.os.source_ami_name}"' in text
    for name, version in cell.pins.items():
        assert f'"{name}" = "{version}"' in text
    for package in matrix.apt.packages:
        assert f'"{package.name}" = "{package.version}"' in text


def test_amazon_ebs_source_requires_imdsv2_and_encrypted_gp3() -> None:
    text = (REPO / "images" / "amazon-ebs.pkr.hcl").read_text()
    assert 'http_tokens                 = "required"' in text
    assert "encrypted             = true" in text and 'volume_type           = "gp3"' in text
    assert "encrypt_boot = true" in text
    assert "var.root_volume_size_gb >= 512" in (REPO / "images" / "variables.pkr.hcl").read_text()
    staged = stage_templates(load_matrix(REPO / "constraints" / "matrix.toml"), legacy=True)
    assert "metadata_options {" not in (staged / "amazon-ebs.pkr.hcl").read_text()  # only for Packer 1.6.6


def _provisioners(text: str) -> list[tuple[str, str]]:
    """(type, body) of each provisioner block of the build, in order."""
    blocks = re.split(r'\n  (?=provisioner "|post-processor ")', text)
    return [(m[1], block) for block in blocks if (m := re.match(r'provisioner "([\w-]+)"', block))]


def test_cleanup_is_the_last_step_on_the_target_of_both_sources() -> None:
    steps = _provisioners((REPO / "images" / "neuron-torch.pkr.hcl").read_text())
    for source in ("docker.local", "amazon-ebs.ubuntu"):
        on_target = [body for kind, body in steps if kind != "shell-local" and ("only" not in body or source in body)]
        assert "images/scripts/cleanup.sh" in on_target[-1], f"{source}: the cleanup is not the last step on the target"
    after_cleanup = [body for _, body in steps[[i for i, (_, b) in enumerate(steps) if "cleanup.sh" in b][-1] + 1 :]]
    assert len(after_cleanup) == 1 and "TESTINFRA_CAPTURED=true" in after_cleanup[0]  # docker:// needs no key
    assert "docker://" in after_cleanup[0]


def test_verify_device_in_the_build_runs_with_the_venv_python() -> None:
    text = (REPO / "images" / "neuron-torch.pkr.hcl").read_text()
    line = next(line for line in text.splitlines() if "/usr/local/bin/verify-device" in line)
    assert "sudo NEURON_TORCH_PYTHON=/opt/neuron-torch/venv/bin/python " in line


def test_ami_sharing_and_access_have_safe_defaults() -> None:
    source = (REPO / "images" / "amazon-ebs.pkr.hcl").read_text()
    begin, end = source.index("# BEGIN packer>=1.7"), source.index("# END packer>=1.7")
    assert re.search(r'imds_support\s+= "v2.0"', source[begin:end])
    assert re.search(r"temporary_security_group_source_public_ip\s+= length\(var.ssh_source_cidrs\) == 0", source)
    for name in ("kms_key_id", "ami_regions", "region_kms_key_ids", "ami_users", "ami_org_arns"):
        assert re.search(rf"{name}\s+= var.{name}", source), name
    assert "ssh_clear_authorized_keys = true" in source
    variables = (REPO / "images" / "variables.pkr.hcl").read_text()
    for name, default in (
        ("kms_key_id", '""'),
        ("ami_users", "[]"),
        ("ami_org_arns", "[]"),
        ("ssh_source_cidrs", "[]"),
    ):
        block = variables[variables.index(f'variable "{name}"') :]
        assert re.search(rf"default\s+= {re.escape(default)}$", block[: block.index("\n}")], re.MULTILINE), name


@needs_packer
def test_an_open_ssh_source_cidr_is_refused(matrix: Matrix, capfd: pytest.CaptureFixture[str]) -> None:
    cell = matrix.release.default_cell
    assert validate(matrix, cell, extra=["-var", 'ssh_source_cidrs=["10.0.0.0/8","0.0.0.0/0"]']) != 0
    out = capfd.readouterr()
    assert "must not open the build instance to the internet" in " ".join((out.out + out.err).split())
    assert validate(matrix, cell, extra=["-var", 'ssh_source_cidrs=["10.0.0.0/8"]']) == 0


def test_required_plugins_stay_out_of_the_template_folder() -> None:
    plugins = (REPO / "images" / "plugins" / "required-plugins.pkr.hcl").read_text()
    for plugin in ("amazon", "ansible", "docker"):
        assert f"github.com/hashicorp/{plugin}" in plugins
    assert not any("required_plugins" in p.read_text() for p in (REPO / "images").glob("*.pkr.hcl"))


@needs_packer
def test_fmt_check_is_clean(matrix: Matrix) -> None:
    assert fmt_check(matrix) == 0


@needs_packer
@pytest.mark.parametrize("cell_id", [c.id for c in load_matrix(REPO / "constraints" / "matrix.toml").cells])
def test_validate_every_cell(matrix: Matrix, cell_id: str) -> None:
    assert validate(matrix, cell_id) == 0


@needs_packer
def test_unsupported_cell_fails_validation_with_the_matrix_reason(
    matrix: Matrix, capfd: pytest.CaptureFixture[str]
) -> None:
    assert validate(matrix, "2.14-py3.11-ubuntu22.04") != 0
    out = capfd.readouterr()
    text = " ".join((out.out + out.err).split())
    assert "The cell_id must be a cell of neuron-2.33.0" in text
    assert matrix.unsupported.os["ubuntu22.04"] in text
    assert matrix.unsupported.python["3.11"] in text


@needs_packer
def test_unsupported_cell_cannot_be_built(matrix: Matrix) -> None:
    with pytest.raises(Exception, match=r"Python 3\.11 is not supported: torch-neuronx"):
        build(matrix, "2.14-py3.11-ubuntu26.04", only="docker")


@needs_packer
def test_real_cell_without_lock_fails_early(matrix: Matrix) -> None:
    cell = matrix.cell("2.14-py3.12-ubuntu24.04")
    if cell.lock_path.is_file():
        pytest.skip(f"{cell.lock_path} exists here")
    with pytest.raises(Exception, match=r"neuron-torch lock --cell 2\.14-py3\.12-ubuntu24\.04.*Note: Neuron 2\.33"):
        build(matrix, cell.id, only="docker")


@needs_packer
def test_amazon_ebs_build_refused_on_legacy_packer(matrix: Matrix, tmp_path: Path) -> None:
    if not is_legacy(packer_version()):
        pytest.skip("this packer supports metadata_options")
    cell = matrix.cell(matrix.release.default_cell)
    # The lock gate comes first (before any work), so the refusal is shown with a sound lock of the cell.
    indexes = build_release_indexes(matrix, tmp_path / "indexes")
    lock = tmp_path / "lock.txt"
    args = [arg for name, url in indexes.items() for arg in ("--index", f"{name}={url}")]
    assert cli_main(["lock", "--cell", cell.id, *args, "--out", str(lock)]) == 0
    with pytest.raises(NeuronTorchError, match="IMDSv2"):
        build(matrix, cell.id, only="amazon-ebs", lock=lock)


def _testbed_up() -> bool:
    try:
        with urllib.request.urlopen("http://127.0.0.1:38024/apt/testbed-archive-key.asc", timeout=3):
            return True
    except OSError:
        return False


@needs_packer
def test_docker_build_of_the_test_cell() -> None:
    test_matrix = load_matrix(REPO / "constraints" / "test-matrix.toml")
    cell = test_matrix.cell(TEST_CELL)
    missing = []
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        missing.append("docker")
    elif subprocess.run(["docker", "image", "inspect", cell.os.base_image], capture_output=True).returncode != 0:
        missing.append(f"the base image {cell.os.base_image} (scripts/testbed.sh build)")
    if not _testbed_up() or not cell.lock_path.is_file():
        missing.append("the test bed on 127.0.0.1:38024 with its locks (scripts/testbed.sh build)")
    if not (REPO / ".venv-ansible" / "bin" / "ansible-playbook").is_file():
        missing.append(".venv-ansible (the Ansible controller venv)")
    if not (REPO / "smoke_tests" / "infra").is_dir():
        missing.append("smoke_tests/infra (the shared testinfra suite, branch image)")
    if missing:
        pytest.skip("docker build of the test cell needs: " + "; ".join(missing))
    out = REPO / "build" / "packer" / TEST_CELL
    shutil.rmtree(out, ignore_errors=True)
    assert build(test_matrix, TEST_CELL, only="docker") == 0
    info = json.loads((out / "version-info.json").read_text())
    assert info["cell"]["id"] == TEST_CELL
    for package in test_matrix.apt.scoped("image"):
        assert info["apt"][package.name].startswith(package.version)
    assert info["pip"]["torch"] == cell.family.torch_pin
    assert info["kernel"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["builds"][-1]["custom_data"]["cell"] == TEST_CELL
    # The suite ran on the build's final state, after the cleanup: the hygiene checks ran there and passed.
    cases = ET.parse(out / "testinfra.xml").getroot().iter("testcase")
    hygiene = {c.get("name"): [e.tag for e in c] for c in cases if "test_hygiene" in (c.get("classname") or "")}
    assert len(hygiene) >= 7, hygiene
    assert not {n: t for n, t in hygiene.items() if {"failure", "error", "skipped"} & set(t)}, hygiene
    image = f"neuron-torch-packer:{TEST_CELL}"
    labels = json.loads(
        subprocess.run(
            ["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", image],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert labels["neuron-torch.cell"] == TEST_CELL
    assert labels["neuron-torch.pin.torch"] == cell.family.torch_pin


def test_cli_build_ami_refuses_an_unsupported_cell_with_the_matrix_reason(capsys: pytest.CaptureFixture[str]) -> None:
    from neuron_torch.cli import main

    assert main(["build", "ami", "--cell", "2.14-py3.12-ubuntu22.04"]) == 2
    assert "Ubuntu 22.04 is end of support" in capsys.readouterr().err
