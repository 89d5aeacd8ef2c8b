"""The Ansible roles and playbooks: lint, the rendered vars, the lock filters, and real runs against containers.

The container tests need docker, the base image `neuron-torch-base:debian12` and (for molecule and the fleet check)
the hermetic test bed serving on 127.0.0.1:38011; they skip with the reason when those are missing. The test bed's
folder is `$NEURON_TORCH_TESTBED_DIR` or `.testbed/` of the checkout (scripts/testbed.sh build writes it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import tomllib
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neuron_torch.matrix import Matrix, load_matrix
from neuron_torch.render_ansible import ansible_data, ansible_vars_path

REPO = Path(__file__).resolve().parents[1]
ANSIBLE = REPO / "ansible"
VENV = REPO / ".venv-ansible" / "bin"
BASE_IMAGE = "neuron-torch-base:debian12"
TEST_CELL = "2.13-py3.11-debian12"
CONVERGED_IMAGE = "neuron-torch-ansible-converged:test"


def tool(name: str) -> Path:
    path = VENV / name
    if not path.exists():
        pytest.skip(f"{path} is missing: run scripts/dev-setup.sh (it makes .venv-ansible with Python 3.12)")
    return path


def run(argv: list[str | Path], timeout: int = 600, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "PY_COLORS": "0"}
    env["PATH"] = f"{VENV}:{env.get('PATH', '/usr/bin:/bin')}"
    env.update(kwargs.pop("env", {}))
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=timeout, env=env, check=False, **kwargs
    )


def docker_ready() -> None:
    if not shutil.which("docker"):
        pytest.skip("docker is not installed")
    if run(["docker", "info"], timeout=60).returncode != 0:
        pytest.skip("the docker daemon is not running (scripts/ci-prereqs.sh starts it)")
    if run(["docker", "image", "inspect", BASE_IMAGE], timeout=60).returncode != 0:
        pytest.skip(f"the test bed's base image {BASE_IMAGE} is missing: run scripts/testbed.sh build")


def find_testbed() -> Path:
    folder = Path(os.environ.get("NEURON_TORCH_TESTBED_DIR", REPO / ".testbed"))
    if not (folder / "mirror.toml").is_file() or not (folder / "locks" / f"{TEST_CELL}.txt").is_file():
        pytest.skip(f"no built test bed at {folder} (mirror.toml, locks/{TEST_CELL}.txt): run scripts/testbed.sh build")
    try:
        urllib.request.urlopen("http://127.0.0.1:38011/apt/testbed-archive-key.asc", timeout=10).close()
    except OSError as error:
        pytest.skip(f"the test bed is not serving on 127.0.0.1:38011 ({error}): run scripts/testbed.sh serve")
    return folder


@pytest.fixture(scope="module")
def test_release_vars() -> Path:
    """The test release's Ansible vars, rendered at test time (the test matrix renders under .testbed/)."""
    from neuron_torch.render import write_rendered

    matrix = load_matrix(REPO / "constraints" / "test-matrix.toml")
    write_rendered(matrix)
    return ansible_vars_path(matrix)


def container(name: str, image: str = BASE_IMAGE) -> str:
    run(["docker", "rm", "-f", name], timeout=120)
    started = run(["docker", "run", "-d", "--name", name, "--network", "host", image, "sleep", "infinity"], timeout=120)
    assert started.returncode == 0, started.stderr
    return name


def inventory(tmp_path: Path, hosts: list[str]) -> Path:
    path = tmp_path / "inventory.yml"
    body = {
        "all": {
            "hosts": {h: {"ansible_connection": "community.docker.docker"} for h in hosts},
            "children": {"controller": {"hosts": {"localhost": {"ansible_connection": "local"}}}},
        }
    }
    path.write_text(json.dumps(body))
    return path


def in_container(name: str, *command: str) -> subprocess.CompletedProcess[str]:
    return run(["docker", "exec", name, *command], timeout=120)


# --- lint ---------------------------------------------------------------------------------------------------------


def test_yamllint_passes() -> None:
    result = run([tool("yamllint"), "--strict", "ansible", ".yamllint"], cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ansible_lint_production_profile_passes() -> None:
    result = run([tool("ansible-lint"), "--offline", "--profile", "production"], cwd=ANSIBLE, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "Profile 'production' was required, and it passed" in result.stdout + result.stderr


# --- rendered vars and the lock filters ---------------------------------------------------------------------------


def test_release_vars_are_rendered_from_the_matrix(matrix: Matrix) -> None:
    path = ansible_vars_path(matrix)
    assert path == REPO / "ansible" / "vars" / "release.yml"
    text = path.read_text()
    assert text.startswith("---\n# Generated by `neuron-torch render`")
    data = json.loads(text.split("\n", 2)[2])
    assert data == ansible_data(matrix)
    release = data["neuron_release"]
    assert set(release["cells"]) == {cell.id for cell in matrix.cells}
    pins = {p["name"]: p["pin"] for p in release["apt"]["packages"]}
    assert pins == {p.name: p.apt_pin for p in matrix.apt.packages}
    assert release["unsupported"]["python"]["3.11"].startswith(
        "Python 3.11 is not supported: torch-neuronx 2.13.3.0 and 2.14.3.0 ship wheels for Python 3.12, 3.13 and 3.14"
    )


def _lock_filters() -> Any:
    spec = importlib.util.spec_from_file_location("neuron_lock", ANSIBLE / "filter_plugins" / "neuron_lock.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOCK = """# Generated by neuron-torch lock; do not edit.
# index neuron: http://127.0.0.1:38011/simple/neuron/
# index pypi: http://127.0.0.1:38011/simple/pypi/
Jinja2==3.1.6 \\
    --hash=sha256:aa \\
    --hash=sha256:bb
    # via torch
    # from http://127.0.0.1:38011/simple/pypi/
torch-neuronx==2.13.3.0.1871 \\
    --hash=sha256:cc
    # from http://127.0.0.1:38011/simple/neuron/
"""


def test_lock_filters_split_the_lock_by_index_and_apply_mirrors() -> None:
    filters = _lock_filters()
    assert filters.neuron_lock_versions(LOCK) == {"jinja2": "3.1.6", "torch-neuronx": "2.13.3.0.1871"}
    groups = filters.neuron_lock_groups(LOCK, {"neuron": "https://mirror.example/neuron/"})
    assert [(g["name"], g["url"]) for g in groups] == [
        ("pypi", "http://127.0.0.1:38011/simple/pypi/"),
        ("neuron", "https://mirror.example/neuron/"),
    ]
    assert groups[0]["requirements"] == "Jinja2==3.1.6 \\\n    --hash=sha256:aa \\\n    --hash=sha256:bb\n"
    installed = [{"name": "Jinja2", "version": "3.1.6"}, {"name": "torch_neuronx", "version": "2.13.3.0.1"}]
    assert filters.neuron_lock_missing(LOCK, installed) == ["torch-neuronx==2.13.3.0.1871"]
    with pytest.raises(ValueError, match="nope"):
        filters.neuron_lock_groups(LOCK, {"nope": "http://x/"})


# --- unsupported cells: refused before any change to the host -----------------------------------------------------


@pytest.fixture(scope="module")
def fresh_host() -> Iterator[str]:
    docker_ready()
    name = container(f"neuron-torch-ansible-fresh-{uuid.uuid4().hex[:8]}")
    yield name
    run(["docker", "rm", "-f", name], timeout=120)


@pytest.mark.parametrize(
    ("cell", "reason"),
    [
        (
            "2.14-py3.11-ubuntu26.04",
            "Python 3.11 is not supported: torch-neuronx 2.13.3.0 and 2.14.3.0 ship wheels for Python 3.12, 3.13 and "
            "3.14 only",
        ),
        ("2.14-py3.12-ubuntu22.04", "ubuntu22.04 is not supported: Ubuntu 22.04 is end of support for TorchNeuron"),
    ],
)
def test_unsupported_cell_fails_at_the_first_task_and_leaves_the_host_unchanged(
    fresh_host: str, tmp_path: Path, cell: str, reason: str
) -> None:
    before = in_container(fresh_host, "sh", "-c", "ls -A /etc/apt/sources.list.d /opt; ls -A /etc").stdout
    result = run(
        [tool("ansible-playbook"), "-i", inventory(tmp_path, [fresh_host]), "playbooks/provision.yml",
         "-e", f"neuron_cell={cell}"],
        cwd=ANSIBLE,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "TASK [Fail with the matrix's reason when the cell is not supported.]" in output
    assert reason in output
    assert f"ok: [{fresh_host}]" not in output and f"changed: [{fresh_host}]" not in output
    assert "Gathering Facts" not in output.split("Fail with the matrix's reason")[1]
    assert in_container(fresh_host, "test", "-e", "/opt/neuron-torch").returncode == 1
    assert in_container(fresh_host, "test", "-e", "/etc/apt/sources.list.d/neuron.list").returncode == 1
    assert in_container(fresh_host, "sh", "-c", "ls -A /etc/apt/sources.list.d /opt; ls -A /etc").stdout == before


# --- molecule: converge, idempotence, the shared testinfra suite --------------------------------------------------


def molecule_env(folder: Path) -> dict[str, str]:
    mirror = tomllib.loads((folder / "mirror.toml").read_text())
    return {
        "NEURON_TORCH_TESTBED_DIR": str(folder),
        "NEURON_TORCH_TESTBED_KEY_FINGERPRINT": mirror["apt"]["key_fingerprint"],
    }


@pytest.fixture(scope="module")
def converged_image(test_release_vars: Path) -> Iterator[str]:
    """`molecule test` for the test cell (destroy, create, converge, idempotence, verify), keeping the converged
    container as an image for the fleet check; the scenario is destroyed afterwards."""
    docker_ready()
    folder = find_testbed()
    molecule = tool("molecule")
    env = molecule_env(folder)
    run([molecule, "destroy"], cwd=ANSIBLE, timeout=600, env=env)  # --destroy never also skips the first destroy
    result = run([molecule, "test", "--destroy", "never"], cwd=ANSIBLE, timeout=1800, env=env)
    output = result.stdout + result.stderr
    try:
        assert result.returncode == 0, output[-12000:]
        for step in ("converge", "idempotence", "verify"):
            assert re.search(rf"{step}\]?:? Executed: Successful", output), (
                f"molecule {step} did not run: {output[-6000:]}"
            )
        committed = run(["docker", "commit", "neuron-torch-molecule-debian12", CONVERGED_IMAGE], timeout=600)
        assert committed.returncode == 0, committed.stderr
    finally:
        run([molecule, "destroy"], cwd=ANSIBLE, timeout=600, env=env)
    yield CONVERGED_IMAGE
    run(["docker", "image", "rm", "-f", CONVERGED_IMAGE], timeout=300)


def test_molecule_converges_idempotently_and_passes_the_shared_testinfra_suite(converged_image: str) -> None:
    inspected = run(["docker", "image", "inspect", converged_image], timeout=60)
    assert inspected.returncode == 0, inspected.stderr


# --- fleet verification -------------------------------------------------------------------------------------------


def test_verify_playbook_writes_one_summary_naming_each_host_and_verdict(converged_image: str, tmp_path: Path) -> None:
    good, bad = f"nt-fleet-good-{uuid.uuid4().hex[:6]}", f"nt-fleet-bad-{uuid.uuid4().hex[:6]}"
    try:
        container(good, converged_image)
        container(bad, converged_image)
        # Break the second host: its venv loses torch, so verify-device must fail there.
        broken = in_container(bad, "rm", "-rf", "/opt/neuron-torch/venv/lib/python3.11/site-packages/torch")
        assert broken.returncode == 0, broken.stderr
        summary = tmp_path / "summary"
        result = run(
            [tool("ansible-playbook"), "-i", inventory(tmp_path, [good, bad]), "playbooks/verify.yml",
             "-e", "neuron_hosts=ungrouped", "-e", "neuron_verify_device=cpu",
             "-e", f"neuron_verify_summary={summary}", "-e", f"neuron_verify_fetch_dir={tmp_path / 'reports'}"],
            cwd=ANSIBLE, timeout=900,
        )  # fmt: skip
        output = result.stdout + result.stderr
        assert result.returncode != 0, output  # one host failed: the play fails after writing the summary
        data = json.loads((summary.with_suffix(".json")).read_text())
        verdicts = {row["host"]: row["verdict"] for row in data["hosts"]}
        assert verdicts == {good: "pass", bad: "fail"}, output[-6000:]
        assert data["passed"] == 1 and data["total"] == 2
        text = summary.with_suffix(".txt").read_text()
        assert f"{good}: pass" in text and f"{bad}: fail" in text
        report = json.loads((tmp_path / "reports" / f"{good}.json").read_text())
        assert report, "the passing host's report was fetched"
    finally:
        run(["docker", "rm", "-f", good, bad], timeout=120)


# --- the uv-standalone route: a plain playbook run, twice, on the Ubuntu 26.04 twin ----------------------------------

UV_CELL = "2.13-py3.13-ubuntu26.04"
UV_PLAY = """---
- name: The cell's Python (uv-standalone) and venv
  hosts: "{host}"
  vars_files: ["{vars}"]
  roles: [python_env]
"""


def test_the_uv_standalone_cell_converges_and_a_second_run_changes_nothing(
    test_release_vars: Path, tmp_path: Path
) -> None:
    """python_env on the uv-standalone cell (3.13 on the 26.04 twin, whose distro ships 3.14), given python3 as
    Ubuntu's AMIs have it (traits.toml [ami.python3]): uv from the pypi index with --require-hashes, the interpreter
    from the test bed's archive through the mirror settings' [python], the venv from the hash lock; then changed=0."""
    docker_ready()
    folder = find_testbed()
    from tests.testbed.baseimages import twin_base

    image = twin_base("ubuntu26.04")
    mirror = tomllib.loads((folder / "mirror.toml").read_text())
    name = container(f"nt-uv-converge-{uuid.uuid4().hex[:6]}", image)
    try:
        prepared = in_container(name, "sh", "-c", "apt-get update -qq && apt-get install -y -qq python3 >/dev/null")
        assert prepared.returncode == 0, prepared.stdout + prepared.stderr
        play = tmp_path / "uv.yml"
        play.write_text(UV_PLAY.format(host=name, vars=test_release_vars))  # never the controller
        extra = {
            "neuron_cell": UV_CELL,
            "neuron_lock_file": str(folder / "locks" / f"{UV_CELL}.txt"),
            "python_env_index_overrides": mirror["indexes"],
            "python_env_uv_python_downloads_json_url": mirror["python"]["downloads_json_url"],
        }
        (tmp_path / "extra.json").write_text(json.dumps(extra))
        argv = [tool("ansible-playbook"), "-i", inventory(tmp_path, [name]), play, "-e", f"@{tmp_path / 'extra.json'}"]
        env = {"ANSIBLE_ROLES_PATH": str(ANSIBLE / "roles"), "ANSIBLE_FILTER_PLUGINS": str(ANSIBLE / "filter_plugins")}
        first = run(argv, cwd=ANSIBLE, env=env, timeout=900)
        assert first.returncode == 0, (first.stdout + first.stderr)[-8000:]
        second = run(argv, cwd=ANSIBLE, env=env, timeout=600)
        assert second.returncode == 0, (second.stdout + second.stderr)[-8000:]
        assert re.search(rf"{name}\s*: ok=\d+\s+changed=0 ", second.stdout), second.stdout[-3000:]
        python = in_container(name, "readlink", "-f", "/opt/neuron-torch/venv/bin/python").stdout.strip()
        assert python.startswith("/opt/neuron-torch/python/cpython-3.13.") and python.endswith("/bin/python3.13")
        assert in_container(name, "test", "-e", "/usr/bin/python3.13").returncode == 1, "the distro has no 3.13"
    finally:
        run(["docker", "rm", "-f", name], timeout=120)
