"""Real hosts over SSH: systemd + sshd containers on the Ubuntu 24.04 twin (tests/testbed/hosts.py), host-key
checking on.

One fresh host must carry every trait of a Canonical Ubuntu AMI's instance (traits.toml [ami]) before anything touches
it. It is converged over SSH with provision.yml on the twin's distro-route cell (twice: the second run must change
nothing), run in --check mode, checked with the shared testinfra suite over ssh:// through images/scripts/testinfra.sh
(the Packer build's own options), and committed as the image of the rest of a fleet of four: the converged host and
a second good one, one whose torch package is broken, one stopped. verify.yml must give each its true verdict.
The converge happens once per module (verify-device installed, not run: verify.yml runs it); every test shares it.
Needs docker, the host image's base and the test bed (they skip, saying why, without them). The fleet's verify runs
verify-device's environment stage only: the twin's torch is a fixture that imports but has no compute (see STAGES).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import testinfra

from neuron_torch.matrix import load_matrix
from tests.integration.test_ansible import ANSIBLE, REPO, docker_ready, find_testbed, molecule_env, run, tool
from tests.integration.test_ansible import test_release_vars as test_release_vars  # a fixture
from tests.testbed.ami_traits import ami_trait_problems
from tests.testbed.harness import TEST_MATRIX
from tests.testbed.hosts import Fleet, HostError, fleet_cell

# The twin's distro-route cell: the hosts start as the Ubuntu AMI's instances do, with the twin's own python3.
FLEET_CELL = fleet_cell()
# verify-device's stages the fleet runs. The twin cells carry the test bed's fixture torch, which imports and carries
# the cell's versions but computes nothing: the environment stage (pins, the imported torch, pip check) is the stage
# whose verdict is real there. The compute stages run on real torch in tests/integration/test_verify_device.py.
STAGES = ["--timeout", "120", "--stages", "environment"]
CONVERGED = "good1"  # the converged host is the fleet's first good host


@dataclass
class Converged:
    fleet: Fleet
    fresh_problems: list[str]
    first: subprocess.CompletedProcess[str]
    second: subprocess.CompletedProcess[str]
    extra_vars: Path
    image: str


def recap(output: str, host: str) -> dict[str, int]:
    """The PLAY RECAP counters of one host (ok, changed, unreachable, failed, ...)."""
    match = re.search(rf"^{re.escape(host)}\s+:\s+(.*)$", output, re.MULTILINE)
    assert match, f"no PLAY RECAP line for {host}: {output[-3000:]}"
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match[1])}


def playbook(fleet: Fleet, name: str, *args: str | Path, timeout: int = 1200) -> subprocess.CompletedProcess[str]:
    argv = [tool("ansible-playbook"), "-i", fleet.inventory(), f"playbooks/{name}", *args]
    return run(argv, cwd=ANSIBLE, timeout=timeout)


def ssh_host(fleet: Fleet, name: str) -> Any:
    """A testinfra host over ssh:// as the login user with sudo, host-key checking on (as a user reaches an AMI)."""
    options = " ".join([*fleet.host_key_options(), "-o", "BatchMode=yes"])
    return testinfra.get_host(
        fleet.hosts[name].ssh_url, ssh_identity_file=str(fleet.identity), ssh_extra_args=options, sudo=True
    )


def converge_vars(folder: Path, testbed: Path, release_vars: Path) -> Path:
    lock = testbed / "locks" / f"{FLEET_CELL}.txt"
    if not lock.is_file():
        pytest.skip(f"no lock for {FLEET_CELL} at {lock}: run scripts/testbed.sh build")
    extra = folder / "converge-vars.json"
    extra.write_text(
        json.dumps(
            {
                "neuron_hosts": CONVERGED,  # --check and the second run touch this host only, whoever joined since
                "neuron_cell": FLEET_CELL,
                "neuron_repo_root": str(REPO),
                "neuron_release_vars": str(release_vars),
                "neuron_repo_key_fingerprint": molecule_env(testbed)["NEURON_TORCH_TESTBED_KEY_FINGERPRINT"],
                "neuron_lock_file": str(lock),
                # verify-device is installed, not run: the fleet's verify.yml runs it on this host and three more
                # (it would run in the first, the second and the --check run of provision.yml, to no new verdict).
                "neuron_verify_run": "never",
            }
        )
    )
    return extra


@pytest.fixture(scope="module")
def converged(tmp_path_factory: pytest.TempPathFactory, test_release_vars: Path) -> Iterator[Converged]:
    docker_ready()
    testbed = find_testbed()
    folder = tmp_path_factory.mktemp("fleet")
    extra = converge_vars(folder, testbed, test_release_vars)
    try:
        fleet = Fleet(folder, f"nt-ssh-{uuid.uuid4().hex[:6]}")
    except HostError as error:
        pytest.fail(str(error))
    image = f"neuron-torch-host-converged:{fleet.prefix}"
    try:
        fleet.start(CONVERGED)
        fresh = ami_trait_problems(ssh_host(fleet, CONVERGED))
        first = playbook(fleet, "provision.yml", "-e", f"@{extra}")
        second = playbook(fleet, "provision.yml", "-e", f"@{extra}") if first.returncode == 0 else first
        if second.returncode == 0:
            fleet.commit(CONVERGED, image)
        yield Converged(fleet, fresh, first, second, extra, image)
    finally:
        fleet.remove()
        if os.environ.get("NEURON_TORCH_KEEP_CONVERGED") != "1":  # =1 keeps it, e.g. for scripts/bench-fleet.py --image
            run(["docker", "image", "rm", "-f", image], timeout=300)


def test_a_fresh_host_carries_every_trait_of_an_ubuntu_ami(converged: Converged) -> None:
    """Read back over SSH (as ubuntu, through sudo) before the converge: the twin's hosts are as strict as an AMI."""
    assert converged.fresh_problems == []


def test_converge_over_ssh_then_a_second_run_changes_nothing(converged: Converged) -> None:
    assert converged.first.returncode == 0, converged.first.stdout[-8000:] + converged.first.stderr[-3000:]
    assert recap(converged.first.stdout, CONVERGED)["changed"] > 0
    assert converged.second.returncode == 0, converged.second.stdout[-8000:]
    assert recap(converged.second.stdout, CONVERGED)["changed"] == 0, converged.second.stdout[-8000:]


def host_text(fleet: Fleet, name: str, *command: str) -> str:
    result = fleet.exec(name, *command)
    return result.stdout.decode().strip()


def test_the_distro_route_venv_runs_the_distributions_interpreter(converged: Converged) -> None:
    """The distro route's own check (molecule's scenario converges the uv-standalone route): the venv runs the
    distribution's interpreter of the cell's Python, not a copy of its own."""
    if converged.second.returncode != 0:
        pytest.fail("the converge failed (see the converge test)")
    cell = load_matrix(TEST_MATRIX).cell(FLEET_CELL)
    assert cell.python_route == "distro"
    venv_python = host_text(converged.fleet, CONVERGED, "readlink", "-f", "/opt/neuron-torch/venv/bin/python")
    assert venv_python == f"/usr/bin/python{cell.python}", venv_python


def test_apt_timers_are_restored_at_the_end_of_the_play(converged: Converged) -> None:
    fleet = converged.fleet
    for unit in ("apt-daily.timer", "apt-daily-upgrade.timer", "unattended-upgrades.service"):
        assert host_text(fleet, CONVERGED, "systemctl", "is-enabled", unit) == "enabled", unit
    for unit in ("apt-daily.timer", "apt-daily-upgrade.timer"):
        assert host_text(fleet, CONVERGED, "systemctl", "is-active", unit) == "active", unit
    # Restored once, at the end: after the last pip install, not at neuron_repo's flush_handlers.
    out = converged.first.stdout
    assert out.rindex("Restore apt's periodic units") > out.rindex("TASK [python_env")


def test_the_kernel_cannot_move_under_the_driver(converged: Converged) -> None:
    fleet = converged.fleet
    selections = host_text(
        fleet, CONVERGED, "dpkg", "--get-selections", "linux-aws", "linux-image-aws", "linux-headers-aws"
    )
    assert dict(line.split() for line in selections.splitlines()) == {
        "linux-aws": "hold", "linux-image-aws": "hold", "linux-headers-aws": "hold",
    }  # fmt: skip
    config = host_text(fleet, CONVERGED, "apt-config", "dump", "Unattended-Upgrade::Package-Blacklist")
    assert 'Unattended-Upgrade::Package-Blacklist:: "linux-";' in config, config


def test_check_mode_runs_through_on_a_provisioned_host(converged: Converged) -> None:
    if converged.second.returncode != 0:
        pytest.fail("the converge failed (see the converge test)")
    result = playbook(converged.fleet, "provision.yml", "--check", "-e", f"@{converged.extra_vars}")
    assert result.returncode == 0, result.stdout[-8000:]
    assert recap(result.stdout, CONVERGED)["failed"] == 0


def run_testinfra(fleet: Fleet, tmp_path: Path, known_hosts: Path) -> subprocess.CompletedProcess[str]:
    for name in ("cell.json", "lock.txt"):
        copied = run(["docker", "cp", f"{fleet.hosts[CONVERGED].container}:/etc/neuron-torch/{name}", tmp_path])
        assert copied.returncode == 0, copied.stderr
    env = {
        "TESTINFRA_PYTHON": str(tool("python")),
        "TESTINFRA_HOSTS": fleet.hosts[CONVERGED].ssh_url,
        "TESTINFRA_TARGET": "host",
        "TESTINFRA_SSH_KEY_FILE": str(fleet.identity),
        "TESTINFRA_KNOWN_HOSTS": str(known_hosts),
        "CELL_FILE": str(tmp_path / "cell.json"),
        "LOCK_FILE": str(tmp_path / "lock.txt"),
        "REPORT_DIR": str(tmp_path / "report"),
    }
    return run(["bash", REPO / "images" / "scripts" / "testinfra.sh"], cwd=REPO, env=env, timeout=900)


def test_shared_testinfra_suite_passes_over_ssh_with_the_packer_options(converged: Converged, tmp_path: Path) -> None:
    if converged.second.returncode != 0:
        pytest.fail("the converge failed (see the converge test)")
    result = run_testinfra(converged.fleet, tmp_path, converged.fleet.known_hosts)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "--ssh-config=" in result.stdout and re.search(r"\d+ passed", result.stdout)


def test_testinfra_refuses_a_host_whose_key_is_not_the_known_one(converged: Converged, tmp_path: Path) -> None:
    wrong = tmp_path / "known_hosts"
    other = Fleet(tmp_path / "other", "unused", image="unused")  # only for a fresh, unrelated key
    line = converged.fleet.hosts[CONVERGED].known_hosts_line.rsplit(" ", 1)[0]
    wrong.write_text(f"{line} {other.identity.with_suffix('.pub').read_text().split()[1]}\n")
    result = run_testinfra(converged.fleet, tmp_path, wrong)
    assert result.returncode != 0
    assert "Host key verification failed" in result.stdout + result.stderr or "HOST IDENTIFICATION HAS CHANGED" in (
        result.stdout + result.stderr
    )


def verify(fleet: Fleet, tmp_path: Path, pattern: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    summary = tmp_path / f"summary-{re.sub(r'[^a-z]', '_', pattern)}"
    extra = {"neuron_hosts": pattern, "neuron_verify_device": "cpu", "neuron_verify_extra_args": STAGES,
             "neuron_verify_summary": str(summary), "neuron_verify_fetch_dir": str(tmp_path / "reports")}  # fmt: skip
    result = playbook(fleet, "verify.yml", "-e", json.dumps(extra), timeout=900)
    data = json.loads(summary.with_suffix(".json").read_text()) if summary.with_suffix(".json").exists() else {}
    return result, data


@pytest.fixture(scope="module")
def fleet_of_four(converged: Converged) -> Fleet:
    """The converged host and three started from its image: good2, bad (torch's package files gone, as a half-removed
    package leaves them), down (stopped). They join the converged host's fleet and inventory, removed with it."""
    if converged.second.returncode != 0:
        pytest.fail("the converge failed (see the converge test)")
    fleet = converged.fleet
    for name in ("good2", "bad", "down"):
        fleet.start(name, image=converged.image)
    broken = fleet.exec("bad", "sh", "-c", "rm -r /opt/neuron-torch/venv/lib/python3*/site-packages/torch")
    assert broken.returncode == 0, broken.stderr
    fleet.stop("down")
    return fleet


def test_fleet_verdict_names_every_host_once_with_its_true_verdict(fleet_of_four: Fleet, tmp_path: Path) -> None:
    result, data = verify(fleet_of_four, tmp_path, "all")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-6000:]
    rows = {row["host"]: row for row in data["hosts"]}
    assert len(data["hosts"]) == len(rows) == 4, data
    assert {h: r["verdict"] for h, r in rows.items()} == {
        CONVERGED: "pass", "good2": "pass", "bad": "fail", "down": "unreachable",
    }, output[-6000:]  # fmt: skip
    assert rows["bad"]["stage"] == "environment" and "torch" in rows["bad"]["message"], (rows["bad"], output[-6000:])
    assert rows["down"]["stage"] == "connect" and rows["down"]["message"], rows["down"]
    assert data["passed"] == 2 and data["total"] == 4
    text = (tmp_path / "summary-all.txt").read_text()
    assert "2 passed, 1 failed, 1 unreachable" in text and "bad: fail (exit 1) at environment:" in text
    assert json.loads((tmp_path / "reports" / f"{CONVERGED}.json").read_text()), "the passing host's report was fetched"


@pytest.mark.parametrize(
    ("pattern", "hosts", "passes"),
    [("good*", {CONVERGED, "good2"}, True), ("all:!bad", {CONVERGED, "good2", "down"}, False)],
)
def test_a_host_pattern_selects_exactly_its_hosts(
    fleet_of_four: Fleet, tmp_path: Path, pattern: str, hosts: set[str], passes: bool
) -> None:
    result, data = verify(fleet_of_four, tmp_path, pattern)
    assert {row["host"] for row in data["hosts"]} == hosts, result.stdout[-6000:]
    assert data["pattern"] == pattern and data["total"] == len(hosts)
    assert (result.returncode == 0) is passes, result.stdout[-6000:]


def test_every_host_unreachable_still_writes_the_summary_and_fails(fleet_of_four: Fleet, tmp_path: Path) -> None:
    result, data = verify(fleet_of_four, tmp_path, "down")
    assert result.returncode != 0
    assert data["hosts"] == [{"host": "down", "verdict": "unreachable", "stage": "connect",
                              "message": data["hosts"][0]["message"]}]  # fmt: skip


def test_a_pattern_that_selects_no_host_fails_with_a_summary(fleet_of_four: Fleet, tmp_path: Path) -> None:
    result, data = verify(fleet_of_four, tmp_path, "nosuchhost*")
    assert result.returncode != 0
    assert data["hosts"] == [] and data["total"] == 0
    assert "selected no host of the inventory" in result.stdout


def run_hygiene(container: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    cell, lock = tmp_path / "cell.json", tmp_path / "lock.txt"
    for name, dest in (("cell.json", cell), ("lock.txt", lock)):
        assert run(["docker", "cp", f"{container}:/etc/neuron-torch/{name}", dest]).returncode == 0
    suite = REPO / "smoke_tests" / "infra" / "test_hygiene.py"
    argv = [tool("python"), "-m", "pytest", "-p", "no:cacheprovider", suite, f"--hosts=docker://{container}",
            "--cell-file", cell, "--lock", lock, "--captured", "-rA"]  # fmt: skip
    return run(argv, cwd=REPO, timeout=600)


def test_hygiene_checks_fail_on_a_host_built_without_cleanup_and_pass_after_it(
    converged: Converged, tmp_path: Path
) -> None:
    if converged.second.returncode != 0:
        pytest.fail("the converge failed (see the converge test)")
    fleet = Fleet(tmp_path / "hygiene", f"nt-hygiene-{uuid.uuid4().hex[:6]}", image=converged.image)
    try:
        fleet.start("captured")
        container = fleet.hosts["captured"].container
        before = run_hygiene(container, tmp_path)
        assert before.returncode != 0, before.stdout[-4000:]
        for check in ("machine_id_is_empty", "no_ssh_host_keys", "no_authorized_keys", "no_build_reports", "logs"):
            assert re.search(rf"FAILED \S+::test_\w*{check}", before.stdout), (check, before.stdout[-4000:])
        script = (REPO / "images" / "scripts" / "cleanup.sh").read_text()
        cleaned = run(["docker", "exec", "-i", container, "sh", "-s"], input=script, timeout=300)
        assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
        after = run_hygiene(container, tmp_path)
        assert after.returncode == 0, after.stdout[-4000:]
        assert "skipped" not in after.stdout.splitlines()[-1], after.stdout[-2000:]
    finally:
        fleet.remove()
