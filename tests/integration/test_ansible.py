"""The Ansible roles and playbooks: lint, the rendered vars, the lock filters, and real runs against containers.

The container tests need docker, the base image `neuron-torch-base:debian12` and (for molecule) the hermetic test bed
serving on 127.0.0.1:38080 and the Ubuntu twins; they skip with the reason when those are missing. The test bed's
folder is `$NEURON_TORCH_TESTBED_DIR` or `.testbed/` of the checkout (scripts/testbed.sh build writes it). The molecule
converge (the uv-standalone route, test_molecule.py beside this file, with this file's helpers; the distro route is
test_fleet.py's) is on the Ubuntu twins with fixture torch; the one converge of the real CPU torch with verify-device
is the Packer docker build of 2.13-py3.11-debian12 (test_packer.py).
"""

from __future__ import annotations

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
from tests import REPO_ROOT, load_module
from tests.testbed import aptrepo
from tests.testbed import folder as bed_folder

REPO = REPO_ROOT
ANSIBLE = REPO / "ansible"
VENV = REPO / ".venv-ansible" / "bin"
BASE_IMAGE = "neuron-torch-base:debian12"
TEST_CELL = "2.13-py3.11-debian12"
# molecule's default scenario (ansible/molecule/default/molecule.yml): the uv-standalone cell on the Ubuntu 26.04 twin
# (the distro-route cell on the Ubuntu 24.04 twin is tests/integration/test_fleet.py's).
UV_CELL = "2.13-py3.13-ubuntu26.04"


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
    folder = bed_folder()
    if not (folder / "mirror.toml").is_file() or not (folder / "locks" / f"{TEST_CELL}.txt").is_file():
        pytest.skip(f"no built test bed at {folder} (mirror.toml, locks/{TEST_CELL}.txt): run scripts/testbed.sh build")
    try:
        urllib.request.urlopen("http://127.0.0.1:38080/apt/testbed-archive-key.asc", timeout=10).close()
    except OSError as error:
        pytest.skip(f"the test bed is not serving on 127.0.0.1:38080 ({error}): run scripts/testbed.sh serve")
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
    return load_module(ANSIBLE / "filter_plugins" / "neuron_lock.py", "neuron_lock")


LOCK = """# Generated by neuron-torch lock; do not edit.
# index neuron: http://127.0.0.1:38080/simple/neuron/
# index pypi: http://127.0.0.1:38080/simple/pypi/
Jinja2==3.1.6 \\
    --hash=sha256:aa \\
    --hash=sha256:bb
    # via torch
    # from http://127.0.0.1:38080/simple/pypi/
torch-neuronx==2.13.3.0.1871 \\
    --hash=sha256:cc
    # from http://127.0.0.1:38080/simple/neuron/
"""


def test_lock_filters_find_what_the_venv_lacks() -> None:
    filters = _lock_filters()
    assert filters.neuron_lock_versions(LOCK) == {"jinja2": "3.1.6", "torch-neuronx": "2.13.3.0.1871"}
    installed = [{"name": "Jinja2", "version": "3.1.6"}, {"name": "torch_neuronx", "version": "2.13.3.0.1"}]
    assert filters.neuron_lock_missing(LOCK, installed) == ["torch-neuronx==2.13.3.0.1871"]


def test_the_roles_take_the_checkout_s_paths_from_the_checkout_filter() -> None:
    """neuron_checkout names every path the roles take from the controller's checkout: in this checkout by default,
    under neuron_repo_root when a user sets it; no role default or task finds the checkout by itself."""
    filters = _lock_filters()
    here = filters.neuron_checkout(None)
    assert Path(here["root"]) == REPO.resolve() and set(here) == {"root", *filters.CHECKOUT_PATHS}
    assert all(Path(path).exists() for name, path in here.items() if name != "state"), here
    assert filters.neuron_checkout("/srv/nt")["key_check"] == "/srv/nt/src/neuron_torch/aptkey.sh"
    for path in [*ANSIBLE.glob("roles/*/defaults/*.yml"), *ANSIBLE.glob("roles/*/tasks/*.yml")]:
        assert "playbook_dir" not in path.read_text(), f"{path} finds the checkout itself: use neuron_checkout"


# --- neuron_verify: the smoke tests as one archive ----------------------------------------------------------------


def local_play(role: str, tasks: str, what: str) -> str:
    """A play that runs one task file of a role on this machine (connection local), as the controller's Python."""
    return f"""---
- name: {what}
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{{{ ansible_playbook_python }}}}"
  tasks:
    - name: Run the role's {tasks.removesuffix(".yml")} tasks.
      ansible.builtin.include_role:
        name: {role}
        tasks_from: {tasks}
"""


INSTALL_PLAY = local_play("neuron_verify", "install.yml", "Install the smoke tests and verify-device")


def test_smoke_tests_are_deployed_as_one_archive_idempotently_and_an_edit_is_deployed_again(tmp_path: Path) -> None:
    """neuron_verify's install tasks into a folder of this machine (connection local): the second run changes
    nothing, an edited smoke test is deployed again, and caches never travel."""
    if os.geteuid() != 0:
        pytest.skip("the role installs files owned by root: run as root (CI does) to test it on this machine")
    source = tmp_path / "smoke_tests"
    shutil.copytree(REPO / "smoke_tests", source, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    (source / "neuron_smoke" / "__pycache__").mkdir()
    (source / "neuron_smoke" / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"stale")
    root = tmp_path / "opt"
    script = REPO / "scripts" / "verify-device.sh"
    link = tmp_path / "bin" / "verify-device"
    extra = {"neuron_verify_smoke_src": str(source), "neuron_verify_script_src": str(script),
             "neuron_verify_root": str(root), "neuron_verify_command_link": str(link)}  # fmt: skip
    (tmp_path / "bin").mkdir()
    (tmp_path / "extra.json").write_text(json.dumps(extra))
    (tmp_path / "play.yml").write_text(INSTALL_PLAY)
    argv = [tool("ansible-playbook"), "-i", "localhost,", tmp_path / "play.yml", "-e", f"@{tmp_path / 'extra.json'}"]
    scratch = tmp_path / "tmp"  # the controller's temporary folders (TMPDIR)
    scratch.mkdir()
    env = {"ANSIBLE_ROLES_PATH": str(ANSIBLE / "roles"), "TMPDIR": str(scratch)}

    def converge() -> int:
        result = run(argv, cwd=ANSIBLE, env=env, timeout=300)
        assert result.returncode == 0, result.stdout[-4000:]
        found = re.search(r"localhost\s*: ok=\d+\s+changed=(\d+) ", result.stdout)
        assert found, result.stdout[-2000:]
        return int(found[1])

    assert converge() > 0
    deployed = root / "smoke_tests"
    assert (deployed / "neuron_smoke" / "__main__.py").read_bytes() == (
        source / "neuron_smoke" / "__main__.py"
    ).read_bytes()
    assert not list(deployed.rglob("__pycache__")) and not list(deployed.rglob("*.pyc"))
    assert oct((deployed / "neuron_smoke").stat().st_mode & 0o777) == "0o755"
    assert oct((deployed / "README.md").stat().st_mode & 0o777) == "0o644"
    assert converge() == 0
    edited = source / "neuron_smoke" / "output.py"
    edited.write_text(edited.read_text() + "# edited on the controller\n")
    assert converge() == 1
    assert (deployed / "neuron_smoke" / "output.py").read_text().endswith("# edited on the controller\n")
    assert not list(scratch.iterdir()), "the controller's archive folder was left behind"


# --- neuron_runtime: the login shell's profile and the shared compile cache ----------------------------------------

PROFILE_PLAY = local_play("neuron_runtime", "profile.yml", "Write the login shell's profile")


def test_the_profile_exports_the_shared_compile_cache_only_when_one_is_set(tmp_path: Path) -> None:
    """neuron_runtime's profile tasks into a folder of this machine (connection local): with neuron_compile_cache_dir
    a login shell gets TORCH_NEURONX_NEFF_CACHE_DIR and the folder exists; empty, the variable is not set at all
    (TorchNeuron's default); a relative path is refused naming the fix, before anything is written."""
    if os.geteuid() != 0:
        pytest.skip("the role writes a root-owned profile: run as root (CI does) to test it on this machine")
    (tmp_path / "play.yml").write_text(PROFILE_PLAY)
    profile, shared = tmp_path / "profile.d" / "neuron-torch.sh", tmp_path / "fsx dir" / "neff-cache"
    profile.parent.mkdir()
    env = {"ANSIBLE_ROLES_PATH": str(ANSIBLE / "roles")}

    def converge(cache: str) -> subprocess.CompletedProcess[str]:
        extra = {"neuron_runtime_profile": str(profile), "neuron_compile_cache_dir": cache}
        (tmp_path / "extra.json").write_text(json.dumps(extra))
        extra_file = f"@{tmp_path / 'extra.json'}"
        argv = [tool("ansible-playbook"), "-i", "localhost,", tmp_path / "play.yml", "-e", extra_file]
        return run(argv, cwd=ANSIBLE, env=env, timeout=300)

    def login_shell_cache() -> str:
        script = f'. "{profile}" && printf "%s|%s" "${{TORCH_NEURONX_NEFF_CACHE_DIR-unset}}" "$PATH"'
        shell = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True, env={"PATH": "/bin"})
        cache, path = shell.stdout.split("|")
        assert path.split(":")[:2] == ["/opt/neuron-torch/venv/bin", "/opt/aws/neuron/bin"]
        return cache

    result = converge("fsx-relative/neff")
    assert result.returncode != 0 and not profile.exists()
    message = "the compile cache folder fsx-relative/neff (neuron_compile_cache_dir) is not an absolute path: give"
    assert message in " ".join(result.stdout.split())
    assert converge(str(shared)).returncode == 0
    assert login_shell_cache() == str(shared)  # quoted for the shell: the path has a space
    assert shared.is_dir() and oct(shared.stat().st_mode & 0o7777) == "0o1777"
    assert converge("").returncode == 0
    assert login_shell_cache() == "unset" and "NEFF" not in profile.read_text()


def _yaml(path: Path) -> Any:
    """A YAML file read by the Ansible controller's PyYAML (ansible-core requires it; .venv may lack it)."""
    script = "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))"
    result = run([tool("python"), "-c", script, path])
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_role_checks_the_key_with_aptkey_sh_and_refuses_a_wrong_fingerprint(tmp_path: Path) -> None:
    """neuron_repo's key check task (copied from key.yml as it stands) on this machine, read-only: the pinned
    fingerprint passes, a wrong one fails with aptkey.sh's message (the one check the image and bundle run too)."""
    if not shutil.which("gpg"):
        pytest.skip("gpg is not installed (scripts/ci-prereqs.sh installs it)")
    fingerprint = aptrepo.make_key(tmp_path / "gnupg")
    key = aptrepo.export_key(tmp_path / "gnupg", fingerprint, tmp_path / "key.asc")
    tasks = _yaml(ANSIBLE / "roles" / "neuron_repo" / "tasks" / "key.yml")
    check = next(task for task in tasks if task["name"].startswith("Check the key's fingerprint"))
    defaults = _yaml(ANSIBLE / "roles" / "neuron_repo" / "defaults" / "main.yml")
    play = [{"name": "The key check", "hosts": "localhost", "connection": "local", "gather_facts": False,
             "vars": {"neuron_repo_key_check": defaults["neuron_repo_key_check"], "neuron_repo_root": str(REPO),
                      "neuron_repo_key_url": "https://example.invalid/key.asc",
                      "neuron_repo_key_download": {"dest": str(key)}},
             "tasks": [check]}]  # fmt: skip
    (tmp_path / "play.yml").write_text(json.dumps(play))  # JSON is YAML
    for pinned, ok in ((fingerprint.lower(), True), (fingerprint[::-1], False)):
        argv = [
            tool("ansible-playbook"),
            "-i",
            "localhost,",
            tmp_path / "play.yml",
            "-e",
            f"neuron_repo_key_fingerprint={pinned}",
        ]
        result = run(argv, cwd=ANSIBLE, timeout=300)
        assert (result.returncode == 0) is ok, result.stdout[-3000:]
        if not ok:
            assert f"has fingerprint(s) {fingerprint}, not the pinned {pinned}: refusing it" in result.stdout


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


# --- molecule: the uv-standalone route converged, idempotence, its interpreter, the shared testinfra suite --------


def molecule_env(folder: Path) -> dict[str, str]:
    """The scenario's settings from the test bed's mirror settings (molecule.yml reads them from the environment)."""
    mirror = tomllib.loads((folder / "mirror.toml").read_text())
    return {
        "NEURON_TORCH_TESTBED_DIR": str(folder),
        "NEURON_TORCH_TESTBED_KEY_FINGERPRINT": mirror["apt"]["key_fingerprint"],
        "NEURON_TORCH_TESTBED_INDEX_PYPI": mirror["indexes"]["pypi"],
        "NEURON_TORCH_TESTBED_PYTHON_DOWNLOADS_JSON_URL": mirror["python"]["downloads_json_url"],
    }
