"""Real hosts over SSH: systemd + sshd containers on the Ubuntu 26.04 twin (tests/testbed/hosts.py), host-key checking
on, provisioned as the README's quick start path A says.

One fresh host must carry every trait of a Canonical Ubuntu AMI's instance (traits.toml [ami]) before anything touches
it. Then path A runs as written, in a copy of the checkout whose user has the mirror settings of
tests/test_quickstart.py (the real release's packages as fixture indexes over HTTP, the test bed's apt repository and
key; for Ansible, the same settings as the group_vars/all.yml beside the user's inventory.ini, as docs/mirrors.md
names them): `neuron-torch lock` and `check` of the real default cell, then step 3's `ansible-playbook ...
provision.yml -e neuron_cell=...` twice (the second run must change nothing), in --check mode, checked with the shared
testinfra suite over ssh:// through images/scripts/testinfra.sh (the Packer build's own options), and step 4's
`verify.yml` as written: with no Neuron device, the environment stage passes and the device stage fails naming the
missing device (exit non-zero). The converged host is committed as the image of the rest of a fleet of four: the
converged host and a second good one, one whose torch package is broken, one stopped; verify.yml must give each its
true verdict. The converge happens once per module (provision.yml installs verify-device without running it where no
device is: its neuron_verify_run is `auto`); every test shares it. Needs docker, the host image's base and the test
bed (they skip, saying why, without them). The fleet's verify runs verify-device's environment stage only: the twin's
torch is a fixture that imports but has no compute (see STAGES).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import testinfra

from neuron_torch.matrix import Matrix
from neuron_torch.mirror import load_mirror
from tests.test_ansible import ANSIBLE, REPO, VENV, docker_ready, find_testbed, run, tool
from tests.test_quickstart import project as project  # a fixture: the user's checkout, mirror settings and PATH
from tests.test_quickstart import quick_start
from tests.testbed.ami_traits import ami_trait_problems
from tests.testbed.hosts import USER, Fleet, HostError

# verify-device's stages the fleet runs. The twin cells carry the test bed's fixture torch, which imports and carries
# the cell's versions but computes nothing: the environment stage (pins, the imported torch, pip check) is the stage
# whose verdict is real there. The compute stages run on real torch in tests/test_verify_device.py.
STAGES = ["--timeout", "120", "--stages", "environment"]
CONVERGED = "good1"  # the converged host is the fleet's first good host


@dataclass
class Converged:
    fleet: Fleet
    fresh_problems: list[str]
    first: subprocess.CompletedProcess[str]
    second: subprocess.CompletedProcess[str]
    image: str
    user: UserCheckout


@dataclass(frozen=True)
class UserCheckout:
    """Path A's user: the checkout (a copy of this one), its environment and the README's four commands."""

    copy: Path
    env: dict[str, str]
    lock: str
    check: str
    provision: str
    verify: str

    def run(self, command: str, *extra: str, timeout: int = 1200) -> subprocess.CompletedProcess[str]:
        """`command` as the README writes it (plus `extra`, e.g. --check), in the checkout, as the user runs it."""
        line = " ".join([command, *map(shlex.quote, extra)])
        return subprocess.run(
            line, shell=True, cwd=self.copy, env=self.env, capture_output=True, text=True, timeout=timeout
        )


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


def write_inventory(copy: Path, fleet: Fleet, name: str) -> None:
    """What the user of path A writes: inventory.ini listing the host (how to reach it, its host key checked against
    known_hosts) and, beside it, group_vars/all.yml with the mirror settings as the Ansible variables docs/mirrors.md
    names for them (the apt repository, its key and pinned fingerprint, the index URLs)."""
    host = fleet.hosts[name]
    common = " ".join(fleet.host_key_options())
    (copy / "inventory.ini").write_text(
        f"[trn2]\n{name} ansible_host=127.0.0.1 ansible_port={host.port}\n\n[all:vars]\nansible_user={USER}\n"
        f"ansible_ssh_private_key_file={fleet.identity}\nansible_ssh_common_args='{common}'\n"
    )
    mirror = load_mirror(copy / "mirror.toml")
    settings = {
        "neuron_repo_url": mirror.apt_url,
        "neuron_repo_key_url": mirror.apt_key_url,
        "neuron_repo_key_fingerprint": mirror.apt_key_fingerprint,
        "python_env_index_overrides": dict(mirror.indexes),
    }
    (copy / "group_vars").mkdir(exist_ok=True)
    (copy / "group_vars" / "all.yml").write_text(json.dumps(settings, indent=2) + "\n")  # JSON is YAML


@pytest.fixture(scope="module")
def converged(
    tmp_path_factory: pytest.TempPathFactory, project: tuple[Path, dict[str, str]], matrix: Matrix
) -> Iterator[Converged]:
    """Path A as the README writes it, on one fresh host: lock and check the default cell, then provision.yml twice
    (the second run must change nothing); the converged host becomes the image of the rest of the fleet."""
    docker_ready()
    find_testbed()
    tool("ansible-playbook")
    copy, env = project
    environment = {**env, "PATH": f"{env['PATH']}:{VENV}", "NO_COLOR": "1", "ANSIBLE_NOCOLOR": "1"}
    user = UserCheckout(copy, environment, *quick_start()[1]["A"])
    assert shlex.split(user.lock)[-1] == matrix.release.default_cell, user.lock
    for step in (user.lock, user.check):
        done = user.run(step, timeout=600)
        assert done.returncode == 0, f"{step}\n{done.stdout}{done.stderr}"
    folder = tmp_path_factory.mktemp("fleet")
    try:
        fleet = Fleet(folder, f"nt-ssh-{uuid.uuid4().hex[:6]}")
    except HostError as error:
        pytest.fail(str(error))
    image = f"neuron-torch-host-converged:{fleet.prefix}"
    try:
        fleet.start(CONVERGED)
        fresh = ami_trait_problems(ssh_host(fleet, CONVERGED))
        write_inventory(copy, fleet, CONVERGED)
        first = user.run(user.provision)
        second = user.run(user.provision) if first.returncode == 0 else first
        if second.returncode == 0:
            fleet.commit(CONVERGED, image)
        yield Converged(fleet, fresh, first, second, image, user)
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
    result = converged.user.run(converged.user.provision, "--check")  # as written, in check mode
    assert result.returncode == 0, result.stdout[-8000:]
    assert recap(result.stdout, CONVERGED)["failed"] == 0


def test_the_verify_step_as_written_fails_at_the_device_stage_naming_the_missing_neuron_device(
    converged: Converged,
) -> None:
    """Path A's step 4, as written, on a provisioned host without a Neuron device (the twin has none, as a host that
    is not a Trn2/Trn3 has none): the environment stage passes, the device stage fails naming the missing device, the
    run exits non-zero and the summary says so."""
    if converged.second.returncode != 0:
        pytest.fail("the converge failed (see the converge test)")
    user = converged.user
    result = user.run(user.verify, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-6000:]
    summary = json.loads((user.copy / ".neuron-torch" / "verify-summary.json").read_text())
    assert [row["host"] for row in summary["hosts"]] == [CONVERGED] and summary["passed"] == 0, summary
    row = summary["hosts"][0]
    assert (row["verdict"], row["stage"], str(row["exit_code"])) == ("fail", "device", "3"), row
    assert row["message"].startswith("no neuron device: /dev/neuron* not found."), row
    report = json.loads((user.copy / ".neuron-torch" / "reports" / f"{CONVERGED}.json").read_text())
    stages = {stage["name"]: stage for stage in report["stages"]}
    assert stages["environment"]["status"] == "pass", stages["environment"]
    assert stages["device"]["status"] == "fail" and stages["device"]["device_missing"], stages["device"]
    assert "Verification did not pass on: good1" in output, output[-3000:]


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
    assert rows["bad"]["stage"] == "environment" and "torch" in rows["bad"]["message"], rows["bad"]
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
