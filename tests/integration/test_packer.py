"""Packer: fmt-clean templates and rendered variables, validation of every cell, refusal of unsupported cells,
and a local docker-source build of the test cell (Ansible provisioner, cleanup last, testinfra with the hygiene
checks on the final state, version-info JSON)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from neuron_torch.cellrecord import schema_version
from neuron_torch.cli import main as cli_main
from neuron_torch.errors import NeuronTorchError
from neuron_torch.matrix import Matrix, load_matrix
from neuron_torch.packer import (
    build,
    fmt_check,
    is_legacy,
    packer_version,
    prepare_build,
    stage_templates,
    validate,
)
from neuron_torch.render_packer import cell_var_file, var_file_path
from tests import REPO_ROOT
from tests.testbed import folder
from tests.testbed.fixture_indexes import build_release_indexes
from tests.testbed.server import base_url, served_token

REPO = REPO_ROOT
TEST_CELL = "2.13-py3.11-debian12"

needs_packer = pytest.mark.skipif(shutil.which("packer") is None, reason="packer is not installed")


def test_rendered_var_files_hold_only_what_the_cell_record_does_not(matrix: Matrix) -> None:
    """Issue 17: the templates read the cell's facts from its versioned record; the variables file names the record
    and holds only what it lacks (Canonical's source AMI, the release vars the playbook reads): no pin in it."""
    cell = matrix.cell(matrix.release.default_cell)
    text = cell_var_file(matrix, cell)
    assert var_file_path(matrix, cell) == REPO / "images" / "cells" / f"{cell.id}.pkrvars.hcl"
    assigned = dict(re.findall(r'^(\w+)\s+= "([^"]*)"$', text, re.MULTILINE))
    assert set(assigned) == {"cell_id", "cell_file", "source_ami_name", "source_ami_owner", "ansible_vars_file"}
    assert assigned["cell_id"] == cell.id and REPO / assigned["cell_file"] == cell.record_path
    assert assigned["source_ami_name"] == cell.os.source_ami_name
    for version in [*cell.pins.values(), *(package.version for package in matrix.apt.packages)]:
        assert version not in text
    record = json.loads(cell.record_path.read_text())
    assert record["schema"] == schema_version() and record["id"] == cell.id
    templates = "".join(path.read_text() for path in sorted((REPO / "images").glob("*.pkr.hcl")))
    assert "jsondecode(file(abspath(var.cell_file)))" in templates


def test_every_declared_packer_variable_is_read() -> None:
    templates = {path.name: path.read_text() for path in sorted((REPO / "images").glob("*.pkr.hcl"))}
    declared = [name for text in templates.values() for name in re.findall(r'^variable "(\w+)"', text, re.MULTILINE)]
    unread = [name for name in declared if not any(f"var.{name}" in text for text in templates.values())]
    assert declared and not unread, unread


@needs_packer
def test_a_cell_record_of_another_schema_version_is_refused_by_validation(
    matrix: Matrix, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    cell = matrix.cell(matrix.release.default_cell)
    record = json.loads(cell.record_path.read_text())
    variants = {"same": record, "next": {**record, "schema": schema_version() + 1}}
    variants["none"] = {key: value for key, value in record.items() if key != "schema"}
    for name, data in variants.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    assert validate(matrix, cell.id, extra=[f"-var=cell_file={tmp_path / 'same.json'}"]) == 0
    capfd.readouterr()
    for name in ("next", "none", "missing"):
        assert validate(matrix, cell.id, extra=[f"-var=cell_file={tmp_path / name}.json"]) != 0, name
        out = capfd.readouterr()
        text = " ".join((out.out + out.err).split())
        assert f"The cell_file must be a cell record of schema {schema_version()}" in text, text


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


# A provisioner written once for both sources takes its source's entry of a map keyed by source type,
# `{ "amazon-ebs" = ..., docker = ... }[source.type]`: each entry's key starts its line (packer fmt aligns the `=`).
_PER_SOURCE = re.compile(r"(?<=[=,] )\{\n(.*?)\n\s*\}\[source\.type\]", re.DOTALL)
_ENTRY_KEY = re.compile(r'^\s*(?:"([\w-]+)"|([\w-]+))\s+=\s', re.MULTILINE)


def _seen_by(body: str, source: str) -> str:
    """A provisioner's body as `source` (e.g. docker.local) is given it: each per-source map cut to its entry."""
    source_type = source.split(".")[0]

    def entry(found: re.Match[str]) -> str:
        keys = list(_ENTRY_KEY.finditer(found[1]))
        ends = [key.start() for key in keys[1:]] + [len(found[1])]
        values = {key[1] or key[2]: re.sub(r"\n\s*#.*", "", found[1][key.end() : end]).strip()
                  for key, end in zip(keys, ends, strict=True)}  # fmt: skip
        assert source_type in values, f"no {source_type} entry in {found[0]}"
        return values[source_type]

    return _PER_SOURCE.sub(entry, body)


def _steps_of(source: str) -> list[tuple[str, str]]:
    """The provisioners that run for one source (those without `only`, and those whose `only` names it), as that
    source is given them."""
    steps = _provisioners((REPO / "images" / "neuron-torch.pkr.hcl").read_text())
    return [(kind, _seen_by(body, source)) for kind, body in steps
            if (m := re.search(r"only\s*=\s*\[([^]]*)\]", body)) is None or f'"{source}"' in m[1]]  # fmt: skip


def _runs(body: str, script: str) -> bool:
    return re.search(rf'\n\s*script\s*=\s*"[^"]*/images/scripts/{re.escape(script)}"', body) is not None


@pytest.mark.parametrize("source", ["docker.local", "amazon-ebs.ubuntu"])
def test_cleanup_is_last_on_the_target_and_the_hygiene_checks_run_on_its_result(source: str) -> None:
    """Issue 14: both sources run the testinfra suite with the hygiene checks (--captured) on the cleaned result."""
    steps = _steps_of(source)
    last_cleanup = max(i for i, (_, body) in enumerate(steps) if _runs(body, "cleanup.sh"))
    after = steps[last_cleanup + 1 :]
    assert after and all(kind == "shell-local" for kind, _ in after), f"{source}: a step on the target after cleanup"
    captured = [body for _, body in after if _runs(body, "testinfra.sh") and '"TESTINFRA_CAPTURED=true"' in body]
    assert len(captured) == 1, f"{source}: no testinfra run with the hygiene checks after the cleanup"
    if source == "docker.local":
        assert "TESTINFRA_HOSTS=docker://" in captured[0]  # docker exec needs no key
        return
    # Over SSH, through the master connection the run before the cleanup opened (the cleanup removed the key a new
    # connection would log in with): same host, host key checked when the master was opened.
    assert '"TESTINFRA_SSH_MASTER=reuse"' in captured[0] and "TESTINFRA_HOSTS=ssh://" in captured[0]
    before = [body for _, body in steps[:last_cleanup] if _runs(body, "testinfra.sh")]
    assert len(before) == 1 and '"TESTINFRA_SSH_MASTER=keep"' in before[0]
    assert "TESTINFRA_CAPTURED" not in before[0] and '"TESTINFRA_JUNIT=testinfra-before-cleanup.xml"' in before[0]
    hosts = [re.search(r'"TESTINFRA_HOSTS=([^"]+)"', body)[1] for body in (before[0], captured[0])]  # type: ignore[index]
    assert hosts[0] == hosts[1]


def _testinfra_sh(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """images/scripts/testinfra.sh against an SSH address where nothing listens (port 9 of loopback)."""
    (tmp_path / "host_key.pub").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake x\n")
    base = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TESTINFRA_PYTHON": sys.executable,
        "TESTINFRA_HOSTS": "ssh://ubuntu@127.0.0.1:9",
        "TESTINFRA_SSH_KEY": "not a key",
        "TESTINFRA_HOST_KEY_FILE": str(tmp_path / "host_key.pub"),
        "TESTINFRA_TARGET": "host",
        "CELL_FILE": str(tmp_path / "cell.json"),
        "LOCK_FILE": str(tmp_path / "lock.txt"),
        "REPORT_DIR": str(tmp_path / "report"),
    }
    script = REPO / "images" / "scripts" / "testinfra.sh"
    return subprocess.run(["bash", str(script)], cwd=REPO, env={**base, **env}, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip


def test_testinfra_after_the_cleanup_refuses_to_run_without_the_master_connection(tmp_path: Path) -> None:
    control = Path(tempfile.mkdtemp(prefix="nt-ctl-"))  # short: a socket path holds at most 107 bytes
    try:
        result = _testinfra_sh(tmp_path, TESTINFRA_SSH_MASTER="reuse", TESTINFRA_CONTROL_DIR=str(control))
        assert result.returncode == 1, result.stdout + result.stderr
        assert "no SSH master to ubuntu@127.0.0.1:9" in result.stderr and "TESTINFRA_SSH_MASTER=keep" in result.stderr
        assert "-m pytest" not in result.stdout  # the suite never ran
        control.chmod(0o755)  # a socket folder others may enter is refused
        result = _testinfra_sh(tmp_path, TESTINFRA_SSH_MASTER="reuse", TESTINFRA_CONTROL_DIR=str(control))
        assert result.returncode == 2 and "mode 0700" in result.stderr, result.stderr
    finally:
        shutil.rmtree(control)
    result = _testinfra_sh(tmp_path, TESTINFRA_SSH_MASTER="always")
    assert result.returncode == 2 and "use keep (before the cleanup) or reuse (after it)" in result.stderr


def test_testinfra_runs_over_the_kept_master_after_the_cleanup_on_an_ssh_host(tmp_path: Path) -> None:
    """The AMI build's order on a systemd + sshd host (tests/testbed/hosts.py): testinfra.sh keeps its SSH master,
    cleanup.sh removes the host keys and the login's authorized key (a new connection is refused), and the run after
    it goes over the master: the hygiene checks pass there, and the master is closed at its end. The host was never
    provisioned, so the installed-layout checks fail in both runs; only the hygiene cases are asserted."""
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("docker is not running")
    from tests.testbed.hosts import Fleet

    fleet = Fleet(tmp_path / "fleet", f"nt-14-master-{os.getpid()}")
    control = Path(tempfile.mkdtemp(prefix="nt-ctl-"))
    try:
        host = fleet.start("ami")
        # A build's cleanup runs minutes after boot, when boot's own units (the journal's flush to /var/log/journal
        # among them) are long done; this host is cleaned seconds after sshd answers, so it waits for the same state.
        fleet.exec("ami", "timeout", "120", "systemctl", "is-system-running", "--wait")
        (tmp_path / "cell.json").write_text('{"id": "none", "apt": {}}')
        (tmp_path / "lock.txt").write_text("")
        ssh = {"TESTINFRA_PYTHON": str(REPO / ".venv-ansible" / "bin" / "python"), "TESTINFRA_HOSTS": host.ssh_url,
               "TESTINFRA_SSH_KEY_FILE": str(fleet.identity), "TESTINFRA_KNOWN_HOSTS": str(fleet.known_hosts),
               "TESTINFRA_CONTROL_DIR": str(control)}  # fmt: skip
        if not Path(ssh["TESTINFRA_PYTHON"]).is_file():
            pytest.skip(".venv-ansible is missing (scripts/dev-setup.sh)")
        kept = _testinfra_sh(tmp_path, **ssh, TESTINFRA_SSH_MASTER="keep", TESTINFRA_JUNIT="before.xml")
        assert "SSH master to ubuntu@127.0.0.1" in kept.stdout, kept.stdout + kept.stderr
        script = (REPO / "images" / "scripts" / "cleanup.sh").read_text()
        cleaned = subprocess.run(["docker", "exec", "-i", host.container, "sh", "-s"], input=script, text=True,
                                 capture_output=True, timeout=300, check=False)  # fmt: skip
        assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
        fresh = subprocess.run(["ssh", *fleet.ssh_options(), "-o", "ControlPath=none", "-p", str(host.port),
                                "ubuntu@127.0.0.1", "true"], capture_output=True, timeout=60, check=False)  # fmt: skip
        assert fresh.returncode == 255, "a new connection still logs in after the cleanup"
        after = _testinfra_sh(tmp_path, **ssh, TESTINFRA_SSH_MASTER="reuse", TESTINFRA_CAPTURED="true")
        cases = ET.parse(tmp_path / "report" / "testinfra.xml").getroot().iter("testcase")
        hygiene = {c.get("name"): [e.tag for e in c] for c in cases if "test_hygiene" in (c.get("classname") or "")}
        assert len(hygiene) >= 7 and not any(hygiene.values()), (hygiene, after.stdout[-3000:])
        assert not list(control.iterdir()), "the master was not closed after the run"
    finally:
        fleet.remove()
        shutil.rmtree(control, ignore_errors=True)


def test_verify_device_in_the_build_runs_with_the_venv_python() -> None:
    assert [kind for kind, body in _steps_of("amazon-ebs.ubuntu") if _runs(body, "verify-on-device.sh")] == ["shell"]
    assert not any(_runs(body, "verify-on-device.sh") for _, body in _steps_of("docker.local"))
    script = (REPO / "images" / "scripts" / "verify-on-device.sh").read_text().replace("\\\n", " ")
    line = next(line for line in script.splitlines() if "/usr/local/bin/verify-device" in line)
    assert "sudo NEURON_TORCH_PYTHON=/opt/neuron-torch/venv/bin/python " in line


@pytest.mark.parametrize("source", ["docker.local", "amazon-ebs.ubuntu"])
def test_each_source_is_given_its_own_entry_of_the_per_source_maps(source: str) -> None:
    """The provisioners written once for both sources: the AMI's scripts run as root through sudo -E, the
    container's as they are (its user is root), and the cleanup names each source's login."""
    template = (REPO / "images" / "neuron-torch.pkr.hcl").read_text()
    as_root = re.search(r"\n  as_root = \{\n(.*?)\n  \}", template, re.DOTALL)
    assert as_root, "local.as_root is missing"
    prefix = dict(re.findall(r'^\s*"?([\w-]+)"?\s+= "([^"]*)"$', as_root[1], re.MULTILINE))
    assert prefix == {"amazon-ebs": "sudo -E ", "docker": ""}
    cleanup = next(body for _, body in _steps_of(source) if _runs(body, "cleanup.sh"))
    login = "build.User" if source == "amazon-ebs.ubuntu" else "var.ssh_username"
    assert f'environment_vars = ["BUILD_USER=${{{login}}}"]' in cleanup, cleanup
    assert "${local.as_root[source.type]}{{ .Vars }} {{ .Path }}" in cleanup


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


@needs_packer
def test_the_shared_compile_cache_goes_to_the_playbook_and_must_be_absolute(
    matrix: Matrix, capfd: pytest.CaptureFixture[str]
) -> None:
    """neuron_compile_cache_dir reaches the playbook under its own name (the neuron_runtime role's setting), and a
    relative path is refused before any build."""
    source = (REPO / "images" / "neuron-torch.pkr.hcl").read_text()
    assert re.search(r"^\s+neuron_compile_cache_dir\s+= var.neuron_compile_cache_dir$", source, re.MULTILINE)
    cell = matrix.release.default_cell
    assert validate(matrix, cell, extra=["-var", "neuron_compile_cache_dir=fsx/neff"]) != 0
    out = capfd.readouterr()
    assert "The neuron_compile_cache_dir must be an absolute path" in " ".join((out.out + out.err).split())
    assert validate(matrix, cell, extra=["-var", "neuron_compile_cache_dir=/fsx/neff"]) == 0


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


# The Packer docker build of the test release: the real CPU torch cell, every verify-device stage on the CPU after
# the Ansible provisioning. One build, not one per Python route: the template has no route of its own (it runs
# provision.yml unchanged with the cell's var file), and each (OS twin, route) is converged once per CI run where
# its claim is strictest. Two twin builds ran here until issue 30; each claim they made stays proven:
# - the distro route's converge on the Ubuntu 24.04 twin, and verify-device's environment stage passing after it:
#   test_fleet.py (over SSH on a systemd host with an AMI's traits, twice, and verify.yml's verdicts);
# - the uv-standalone route's converge on the Ubuntu 26.04 twin: test_molecule.py (converge, idempotence, the
#   route's interpreter, the shared testinfra suite);
# - the docker source's bootstrap of python3 and sudo on an Ubuntu base that has neither ([container.no_python3];
#   Debian 12's base has both): test_the_docker_source_bootstrap_gives_an_ubuntu_base_what_an_ami_starts_with;
# - the cleanup last, testinfra with the hygiene checks on the final state, version-info, manifest and labels: the
#   build below (the same provisioners for every cell), and the hygiene suite on the fleet's converged host.
BUILD_CELLS = {TEST_CELL: ["all"]}
COMPUTED = ("environment", "device", "matmul", "model", "compile", "collectives")


def _build_problems(test_matrix: Matrix, testbed: Path) -> list[str]:
    missing = []
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        return ["docker"]
    for cell_id in BUILD_CELLS:
        cell = test_matrix.cell(cell_id)
        if subprocess.run(["docker", "image", "inspect", cell.os.base_image], capture_output=True).returncode != 0:
            missing.append(f"the base image {cell.os.base_image} (scripts/testbed.sh build)")
        if not cell.lock_path.is_file():
            missing.append(f"the lock of {cell_id} (scripts/testbed.sh build)")
    if served_token() is None:
        missing.append(f"the test bed serving on {base_url()} (scripts/testbed.sh build)")
    if not (REPO / ".venv-ansible" / "bin" / "ansible-playbook").is_file():
        missing.append(".venv-ansible (the Ansible controller venv)")
    if not (testbed / "mirror.toml").is_file():
        missing.append(f"{testbed}/mirror.toml (scripts/testbed.sh build)")
    return missing


def _playbook_vars(cell_id: str, mirror: dict[str, Any]) -> dict[str, Any]:
    """verify-device run inside the build on the CPU (as on a build instance with a Neuron device), the apt key
    checked against the test bed's fingerprint, and the test bed as the mirror (docs/mirrors.md) as molecule passes
    it: uv from its pypi index, hash-checked, and the standalone interpreter from its download metadata."""
    return {
        "neuron_verify_run": "always",
        "neuron_verify_device": "cpu",
        "neuron_verify_extra_args": [] if BUILD_CELLS[cell_id] == ["all"] else BUILD_CELLS[cell_id],
        "neuron_verify_fetch_dir": str(REPO / "build" / "packer" / cell_id / "reports"),
        "neuron_repo_key_fingerprint": mirror["apt"]["key_fingerprint"],
        "python_env_index_overrides": {"pypi": mirror["indexes"]["pypi"]},
        "python_env_uv_python_downloads_json_url": mirror["python"]["downloads_json_url"],
    }


@pytest.fixture(scope="module")
def docker_builds() -> dict[str, int]:
    """Each BUILD_CELLS cell's `packer build -only=docker.local`, run side by side after each was prepared (lock
    gate, fmt -check, validate) in turn; each build's log is build/packer/<cell>/packer.log.

    The debian12 build is the one converge of the real CPU torch with every verify-device stage after it, proven
    nowhere else (test_image runs verify-device in the Dockerfile's image, not after the Ansible provisioning;
    molecule and the fleet run the environment stage only)."""
    testbed = folder()
    test_matrix = load_matrix(REPO / "constraints" / "test-matrix.toml")
    missing = _build_problems(test_matrix, testbed)
    if missing:
        pytest.skip("the Packer docker builds need: " + "; ".join(dict.fromkeys(missing)))
    mirror = tomllib.loads((testbed / "mirror.toml").read_text())
    commands = {}
    for cell_id in BUILD_CELLS:
        shutil.rmtree(REPO / "build" / "packer" / cell_id, ignore_errors=True)
        extra = [f"-var=ansible_extra_vars={json.dumps(_playbook_vars(cell_id, mirror))}"]
        commands[cell_id] = prepare_build(test_matrix, cell_id, only="docker", extra=extra)
    running = {}
    for cell_id, command in commands.items():
        log = REPO / "build" / "packer" / cell_id / "packer.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as out:
            running[cell_id] = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        return {cell_id: process.wait(timeout=1500) for cell_id, process in running.items()}
    finally:
        for process in running.values():
            process.kill()  # only one still running after the timeout: the test fails on its missing exit status


@needs_packer
@pytest.mark.parametrize("cell_id", list(BUILD_CELLS))
def test_docker_build(docker_builds: dict[str, int], cell_id: str) -> None:
    """The Ansible provisioner, verify-device inside the build (every stage on real torch), cleanup last, testinfra
    with the hygiene checks after it, version-info, manifest and labels."""
    test_matrix = load_matrix(REPO / "constraints" / "test-matrix.toml")
    cell = test_matrix.cell(cell_id)
    out = REPO / "build" / "packer" / cell_id
    log = (out / "packer.log").read_text(errors="replace")
    assert docker_builds[cell_id] == 0, log[-12000:]
    report = json.loads((out / "reports" / "default.json").read_text())  # Packer's Ansible host is "default"
    stages = {stage["name"]: stage["status"] for stage in report["stages"]}
    assert report["exit_code"] == 0, stages
    if BUILD_CELLS[cell_id] == ["all"]:
        assert set(stages.values()) <= {"pass", "skip"} and all(stages[s] == "pass" for s in COMPUTED), stages
    else:
        assert {s: v for s, v in stages.items() if v != "skip"} == {"environment": "pass"}, stages
    info = json.loads((out / "version-info.json").read_text())  # neuron_cell.sbom, as in the image
    assert info["cell"] == cell_id and info["release"] == test_matrix.release.name
    assert info["python"].startswith(f"{cell.python}.")
    for package in test_matrix.apt.scoped("image"):
        assert info["packages"]["apt"][package.name].startswith(package.version)
    assert set(info["neuron"]) >= {"runtime", "collectives", "tools"}
    assert info["packages"]["pip"]["torch"] == cell.family.torch_pin
    assert info["kernel"] and isinstance(info["dkms"], list)
    for name in ("sbom-venv.cdx.json", "sbom-apt.cdx.json"):
        assert json.loads((out / name).read_text())["bomFormat"] == "CycloneDX", name
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["builds"][-1]["custom_data"]["cell"] == cell_id
    # The suite ran on the build's final state, after the cleanup: the hygiene checks ran there and passed.
    cases = ET.parse(out / "testinfra.xml").getroot().iter("testcase")
    results = {f"{c.get('classname')}.{c.get('name')}": [e.tag for e in c] for c in cases}
    hygiene = {name: tags for name, tags in results.items() if "test_hygiene" in name}
    assert len(hygiene) >= 7 and not [n for n, t in results.items() if {"failure", "error"} & set(t)], results
    assert not {n: t for n, t in hygiene.items() if "skipped" in t}, hygiene
    image = f"neuron-torch-packer:{cell_id}"
    inspect = ["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", image]
    labels = json.loads(subprocess.run(inspect, capture_output=True, text=True, check=True).stdout)
    assert labels["neuron-torch.cell"] == cell_id and labels["neuron-torch.base-image"] == cell.os.base_image
    assert labels["neuron-torch.pin.torch"] == cell.family.torch_pin
    for package in test_matrix.apt.packages:
        assert labels[f"neuron-torch.apt.{package.name}"] == package.version


def _docker_bootstrap_lines() -> list[str]:
    """The inline lines of the template's docker-only shell provisioner that gives the base python3 and sudo."""
    template = (REPO / "images" / "neuron-torch.pkr.hcl").read_text()
    block = re.search(r'only = \["docker\.local"\]\n\s*inline = (\[.*?\n\s*\])', template, re.DOTALL)
    assert block, "the docker source's python3 and sudo provisioner is gone from images/neuron-torch.pkr.hcl"
    lines: list[str] = json.loads(re.sub(r",\s*\]$", "]", block[1]))
    assert any("python3 sudo" in line for line in lines), lines
    return lines


def test_the_docker_source_bootstrap_gives_an_ubuntu_base_what_an_ami_starts_with() -> None:
    """The template's own lines, run as Packer's shell provisioner runs them (`/bin/sh -e`), on the Ubuntu 26.04
    twin's base, which has neither python3 nor sudo ([container.no_python3]): afterwards both run, and a second run
    finds them and installs nothing. (The Debian 12 base of the build above has both, so its build skips them.)"""
    from tests.testbed.baseimages import twin_base

    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("docker is not available")
    if served_token() is None:
        pytest.skip(f"the test bed is not serving on {base_url()} (scripts/testbed.sh build): the twin's apt source")
    script = "\n".join(["set -e", *_docker_bootstrap_lines()])
    check = "/usr/bin/python3 -c 'import sys; print(sys.version_info[0])' && sudo -n true && echo both-run"
    before = "test ! -e /usr/bin/python3 && test ! -e /usr/bin/sudo && echo neither"
    command = f"{before} && ( {script} ) && {check} && ( {script} )"
    run = ["docker", "run", "--rm", "--network=host", "--entrypoint=/bin/sh", twin_base("ubuntu26.04"), "-c", command]
    result = subprocess.run(run, capture_output=True, text=True, timeout=600)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert out.split()[:1] == ["neither"], out[-4000:]
    assert "python3 and sudo: installed, as an Ubuntu AMI has them" in out and "both-run" in out, out[-4000:]
    assert out.rstrip().endswith("python3 and sudo: present"), out[-4000:]


def test_cli_build_ami_refuses_an_unsupported_cell_with_the_matrix_reason(capsys: pytest.CaptureFixture[str]) -> None:
    from neuron_torch.cli import main

    assert main(["build", "ami", "--cell", "2.14-py3.12-ubuntu22.04"]) == 2
    assert "Ubuntu 22.04 is end of support" in capsys.readouterr().err


# ---- Release identity: name, tags, deprecation, SSM parameters, sharing (`build ami --dry-run`) ----
def _dry_run(capsys: pytest.CaptureFixture[str], *options: str) -> tuple[int, str, str]:
    argv = ["--matrix", str(REPO / "constraints" / "test-matrix.toml"), "build", "ami", "--cell", TEST_CELL]
    code = cli_main([*argv, "--dry-run", *options])
    out = capsys.readouterr()
    return code, out.out, out.err


@needs_packer
def test_build_ami_dry_run_shows_the_name_tags_deprecation_and_ssm_parameters(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import datetime
    import hashlib

    matrix = load_matrix(REPO / "constraints" / "test-matrix.toml")
    lock = matrix.cell(TEST_CELL).lock_path
    if not lock.is_file():
        pytest.skip("the test cell's lock is missing (scripts/testbed.sh build makes it)")
    before = datetime.datetime.now(datetime.UTC)
    code, out, err = _dry_run(capsys)
    assert code == 0, err
    release = matrix.release.name
    name = f"neuron-torch-{release}-{TEST_CELL}-{before:%Y%m%d}"
    assert f"AMI name:     {name}\n" in out
    git = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, cwd=REPO)
    for tag, value in (("Name", name), ("neuron-torch:cell", TEST_CELL), ("neuron-torch:release", release),
                       ("neuron-torch:lock-sha256", hashlib.sha256(lock.read_bytes()).hexdigest())):  # fmt: skip
        assert f"\n  {tag} = {value}\n" in out, tag
    assert re.search(rf"\n  neuron-torch:git-sha = {git.stdout.strip()}(-dirty)?\n", out)
    deprecate = re.search(r"deprecate at: (\S+) \(deprecate_after = 17520h\)", out)
    assert deprecate, out
    at = datetime.datetime.fromisoformat(deprecate[1].replace("Z", "+00:00"))
    assert datetime.timedelta(days=730) <= at - before < datetime.timedelta(days=730, minutes=10)
    ssm = f"/neuron-torch/{release}/{TEST_CELL}"
    assert f"\n  {ssm}/image_id\n  {ssm}/recommended/image_id\n" in out and "not written" in out
    assert "shared with: nobody (a private AMI)" in out

    shared = ("--var", 'ami_users=["123456789012"]')
    code, out, err = _dry_run(capsys, *shared)  # Packer's own rule: the AWS managed key cannot be shared
    assert code == 2 and "Cannot share AMI encrypted with default KMS key" in err, err
    code, out, err = _dry_run(capsys, "--var", "ami_build_number=2", "--var", "ssm_recommend=false", *shared,
                              "--var", "kms_key_id=alias/neuron-torch-ami")  # fmt: skip
    assert code == 0, err
    assert f"AMI name:     {name}-2\n" in out and "recommended" not in out and "accounts 123456789012" in out


@needs_packer
@pytest.mark.parametrize(
    ("setting", "problem"),
    [
        ('ami_users=["12345678901a"]', "The ami_users must be 12-digit AWS account ids"),
        ('ami_org_arns=["o-abcd1234ef"]', "The ami_org_arns must be organization ARNs"),
        ("deprecate_after=2y", "The deprecate_after must be a duration such as 17520h"),
        ("ami_build_number=0", "The ami_build_number must be a whole number, at least 1"),
    ],
)
def test_build_ami_dry_run_refuses_a_bad_setting_in_one_line(
    capsys: pytest.CaptureFixture[str], setting: str, problem: str
) -> None:
    code, _, err = _dry_run(capsys, "--var", setting)
    assert code == 2 and problem in err and len(err.strip().splitlines()) == 1, err


def test_the_ami_is_deprecated_and_publishes_ssm_parameters_only_from_the_ami_source() -> None:
    source = (REPO / "images" / "amazon-ebs.pkr.hcl").read_text()
    begin, end = source.index("# BEGIN packer>=1.7"), source.index("# END packer>=1.7")
    assert "deprecate_at = local.deprecate_at" in source[begin:end], "Packer 1.6.6 has no deprecate_at"
    template = (REPO / "images" / "neuron-torch.pkr.hcl").read_text()
    block = template[template.index('post-processor "shell-local"') :]
    assert 'only = ["amazon-ebs.ubuntu"]' in block and "ssm-publish.sh" in block
    assert template.index('post-processor "manifest"') < template.index('post-processor "shell-local"')


@pytest.mark.parametrize("publish", ["true", "false"])
def test_ssm_publish_points_each_parameter_of_each_region_at_its_ami(tmp_path: Path, publish: str) -> None:
    manifest = tmp_path / "manifest.json"
    old = {"packer_run_uuid": "old", "artifact_id": "us-east-1:ami-0old"}
    new = {"packer_run_uuid": "new", "artifact_id": "us-east-1:ami-0aaa,eu-west-1:ami-0bbb"}
    manifest.write_text(json.dumps({"builds": [old, new], "last_run_uuid": "new"}))
    (tmp_path / "bin").mkdir()
    aws = tmp_path / "bin" / "aws"
    aws.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/aws.log\n')
    aws.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "MANIFEST": str(manifest),
           "SSM_PARAMETERS": "/nt/r/c/image_id /nt/r/c/recommended/image_id", "SSM_PUBLISH": publish}  # fmt: skip
    script = REPO / "images" / "scripts" / "ssm-publish.sh"
    result = subprocess.run(["sh", str(script)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("ssm: ") == 4 and "ami-0old" not in result.stdout
    assert "ssm: eu-west-1 /nt/r/c/recommended/image_id = ami-0bbb" in result.stdout
    calls = (tmp_path / "aws.log").read_text().splitlines() if publish == "true" else []
    assert len(calls) == (4 if publish == "true" else 0)
    if calls:
        assert calls[0] == ("ssm put-parameter --region us-east-1 --name /nt/r/c/image_id --value ami-0aaa "
                            "--type String --data-type aws:ec2:image --overwrite")  # fmt: skip


@needs_packer
def test_build_ami_takes_a_packer_path_relative_to_the_callers_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Packer runs in the checkout; `--packer ./packer` names the caller's file (it was an internal error: Python's
    FileNotFoundError for ./packer in the checkout). The run reaches Packer's own validation of a bad setting."""
    packer = shutil.which("packer")
    assert packer
    (tmp_path / "packer").symlink_to(packer)
    monkeypatch.chdir(tmp_path)
    code, _, err = _dry_run(capsys, "--packer", "./packer", "--var", "ami_build_number=0")
    assert code == 2 and "The ami_build_number must be a whole number, at least 1" in err, err
