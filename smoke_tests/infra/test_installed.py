"""The installed neuron-torch layout, the same on an image, a host and an AMI (see README.md)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import neuron_cell
from neuron_cell.pins import apt_matches, satisfies

VENV = "/opt/neuron-torch/venv"
PYTHON = f"{VENV}/bin/python"
SMOKE = "/opt/neuron-torch/smoke_tests"
LIB = "/opt/neuron-torch/lib"  # neuron_cell, which verify-device (and the builders before it) run
VERIFY = "/opt/neuron-torch/scripts/verify-device.sh"
SLURM = "/opt/neuron-torch/scripts/slurm"  # the health check and the cluster check job (docs/slurm.md)
HEALTHCHECK_SETTINGS = "/etc/default/neuron-healthcheck"
PROFILE = "/etc/profile.d/neuron-torch.sh"
PATH_ENTRIES = ("/opt/aws/neuron/bin", f"{VENV}/bin")
LIBRARY_ENTRIES = ("/opt/aws/neuron/lib",)
# Installed by `python -m venv` itself, not by the lock.
VENV_TOOLS = {"pip", "setuptools", "wheel"}
LIST_DISTRIBUTIONS = (
    "import json, importlib.metadata as m; "
    "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
)


def environment(host: Any, target: str) -> dict[str, str]:
    """The environment a workload gets: the container's own (image) or a login shell's (host: the profile script)."""
    if target == "image":
        return dict(host.environment())
    command = f". {PROFILE} && env"
    output = host.check_output(f"bash -c {json.dumps(command)}")
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def test_venv_holds_exactly_the_lock(host: Any, locked: dict[str, str], canonical: Callable[[str], str]) -> None:
    listing = json.loads(host.check_output(f"{PYTHON} -c {LIST_DISTRIBUTIONS!r}"))
    installed = {canonical(name): version for name, version in listing.items()}
    wrong = {name: (version, installed.get(name)) for name, version in locked.items() if installed.get(name) != version}
    assert not wrong, f"venv versions differ from the lock (name: (locked, installed)): {wrong}"
    extra = set(installed) - set(locked) - VENV_TOOLS
    assert not extra, f"packages in the venv that the lock does not hold: {sorted(extra)}"


def test_neuron_cell_is_the_controllers_whole(host: Any) -> None:
    """The lock and pin code the target runs is the checkout's neuron_cell, every file (its digest), importable by
    the venv's Python beside the smoke tests."""
    result = host.run(f"PYTHONPATH={LIB} {PYTHON} -m neuron_cell --expect {neuron_cell.digest()}")
    assert result.rc == 0, result.stdout + result.stderr


def test_pip_check_passes(host: Any) -> None:
    result = host.run(f"{PYTHON} -m pip check --disable-pip-version-check")
    assert result.rc == 0, result.stdout + result.stderr


def test_venv_has_the_cells_pins(host: Any, cell: dict[str, Any]) -> None:
    torch = host.check_output(f"{PYTHON} -c 'import importlib.metadata as m; print(m.version(\"torch\"))'")
    assert torch == cell["torch"]
    neuronx = host.check_output(f"{PYTHON} -c 'import importlib.metadata as m; print(m.version(\"torch-neuronx\"))'")
    assert satisfies("torch-neuronx", cell["torch_neuronx"], neuronx) is None, neuronx


def test_apt_packages_installed_at_pinned_versions(host: Any, cell: dict[str, Any]) -> None:
    for name, version in cell["apt"].items():
        package = host.package(name)
        assert package.is_installed, f"{name} is not installed"
        assert apt_matches(version, package.version), f"{name} {package.version} is not the pinned {version}*"


def test_driver_package_on_hosts(host: Any, cell: dict[str, Any], target: str) -> None:
    if target == "image":
        pytest.skip("the driver (aws-neuronx-dkms) belongs on the host, never in an image")
    if host.run("systemd-detect-virt --container || test -f /.dockerenv").rc == 0:
        pytest.skip("the target is a container (molecule): the DKMS driver is skipped there")
    for name, version in cell["apt_host"].items():
        package = host.package(name)
        assert package.is_installed, f"{name} is not installed"
        assert apt_matches(version, package.version), f"{name} {package.version} is not the pinned {version}*"


def test_runtime_user(host: Any, target: str, runtime_user: str) -> None:
    user = host.user(runtime_user)
    assert user.exists, f"user {runtime_user} is missing"
    assert user.uid != 0
    if target == "image":
        assert user.uid == 1000
        assert host.user().uid != 0, "the image runs as root by default"


def test_environment_paths(host: Any, target: str) -> None:
    env = environment(host, target)
    path = env.get("PATH", "").split(":")
    libraries = env.get("LD_LIBRARY_PATH", "").split(":")
    assert all(entry in path for entry in PATH_ENTRIES), f"PATH lacks {PATH_ENTRIES}: {path}"
    assert all(entry in libraries for entry in LIBRARY_ENTRIES), f"LD_LIBRARY_PATH lacks {LIBRARY_ENTRIES}: {libraries}"


def test_a_configured_compile_cache_folder_exists(host: Any, target: str) -> None:
    """TORCH_NEURONX_NEFF_CACHE_DIR, where the image (`-e`) or the host's profile (neuron_compile_cache_dir) sets it,
    names a folder that is there: TorchNeuron would otherwise make a private one and no node would share it."""
    cache = environment(host, target).get("TORCH_NEURONX_NEFF_CACHE_DIR", "")
    if not cache:
        pytest.skip("TORCH_NEURONX_NEFF_CACHE_DIR is not set: TorchNeuron's default cache (/tmp/neff_cache) is used")
    assert cache.startswith("/") and host.file(cache).is_directory, f"the compile cache {cache} is not a folder"


def test_installed_paths(host: Any) -> None:
    assert host.file(PYTHON).exists
    assert host.file(f"{SMOKE}/neuron_smoke/__main__.py").is_file
    assert host.file(VERIFY).is_file and host.file(VERIFY).mode & 0o111
    link = host.file("/usr/local/bin/verify-device")
    assert link.exists and ((link.is_symlink and link.linked_to == VERIFY) or link.is_file)


def test_slurm_health_check_installed_with_its_settings(host: Any, target: str) -> None:
    """On a host or AMI (Slurm runs the health check on the node, not in a container): the health check and the
    cluster check job are executable, and the settings Slurm's almost empty environment leaves them to read name the
    venv and the cell file that are there, and the shared reports' folder by an absolute path where one is set."""
    if target == "image":
        pytest.skip("the Slurm health check runs on the node (HealthCheckProgram, Epilog), not in an image")
    for name in ("neuron-healthcheck", "verify-cluster.sbatch"):
        script = host.file(f"{SLURM}/{name}")
        assert script.is_file and script.mode & 0o111, f"{SLURM}/{name} is not an executable file"
    text = host.file(HEALTHCHECK_SETTINGS).content_string
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    settings = dict(line.split("=", 1) for line in lines if "=" in line)
    assert len(settings) == len(lines), f"{HEALTHCHECK_SETTINGS} has lines that are not NAME=value: {text!r}"
    assert settings.get("NEURON_TORCH_VENV") == VENV and host.file(f"{VENV}/bin/python").exists, settings
    assert host.file(settings.get("NEURON_TORCH_CELL_FILE", "")).is_file, settings
    cluster_dir = settings.get("NEURON_TORCH_CLUSTER_DIR")
    assert cluster_dir is None or cluster_dir.startswith("/"), f"NEURON_TORCH_CLUSTER_DIR {cluster_dir!r}"


def test_cell_record_and_lock_installed(host: Any, cell: dict[str, Any], lock_path: Path) -> None:
    installed = json.loads(host.file("/etc/neuron-torch/cell.json").content_string)
    assert installed["id"] == cell["id"]
    assert installed["apt"] == cell["apt"]
    assert installed.get("locked"), "cell.json has no 'locked' versions"
    assert host.file("/etc/neuron-torch/lock.txt").content_string == lock_path.read_text(encoding="utf-8")


def test_neuron_ls_present(host: Any, target: str) -> None:
    tool = host.file("/opt/aws/neuron/bin/neuron-ls")
    assert tool.is_file and tool.mode & 0o111, "neuron-ls is missing or not executable"
    found = (
        host.run("bash -c 'command -v neuron-ls'")
        if target == "image"
        else host.run(f"bash -c '. {PROFILE} && command -v neuron-ls'")
    )
    assert found.stdout.strip() == "/opt/aws/neuron/bin/neuron-ls"


def test_no_ca_bundle_or_proxy_settings_left(host: Any, target: str) -> None:
    assert not host.file("/run/secrets/ca").exists
    if target == "image":  # a host may carry a mirror's pip.conf on purpose; an image never needs one
        assert not host.file("/etc/pip.conf").exists
    env = environment(host, target)
    leaked = [key for key in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE") if key in env]
    assert not leaked, f"CA settings left in the environment: {leaked}"
    grep = host.run("grep -rls 'CaInfo' /etc/apt/apt.conf.d")
    assert grep.stdout.strip() == "", f"apt CA settings left: {grep.stdout}"


def root_listing(host: Any, image: str | None, folder: str) -> str:
    """`ls -A folder` as root: through a root container of the image (the suite's container runs as the user)."""
    command = f"ls -A {folder} 2>/dev/null || true"
    if image:
        docker = ["docker", "run", "--rm", "--user", "0", "--network", "none", "--entrypoint", "/bin/sh", image]
        return subprocess.run([*docker, "-c", command], capture_output=True, text=True, check=True).stdout.strip()
    return str(host.run(command).stdout).strip()


@pytest.mark.usefixtures("image_only")
def test_no_package_caches(host: Any, runtime_user: str, pytestconfig: pytest.Config) -> None:
    image = pytestconfig.getoption("--image")
    for folder in ("/root/.cache/pip", f"/home/{runtime_user}/.cache/pip", "/root/.cache/uv"):
        assert root_listing(host, image, folder) == "", f"package cache left in {folder}"
    debs = host.run("find /var/cache/apt/archives -name '*.deb'")
    assert debs.stdout.strip() == "", f".debs left: {debs.stdout}"
    lists = host.run("find /var/lib/apt/lists -mindepth 1 -maxdepth 1 ! -name lock ! -name partial")
    assert lists.stdout.strip() == "", f"apt lists left: {lists.stdout}"


@pytest.mark.usefixtures("image_only")
def test_no_build_toolchain(host: Any) -> None:
    for tool in ("gcc", "cc", "make", "g++", "curl"):
        assert host.run(f"bash -c 'command -v {tool}'").rc != 0, f"{tool} is in the runtime image"


def test_image_labels(image_name: str, cell: dict[str, Any]) -> None:
    output = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", image_name],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    labels = json.loads(output)
    assert labels["io.neuron-torch.cell"] == cell["id"]
    assert labels["io.neuron-torch.release"] == cell["release"]
    assert f"torch=={cell['torch']}" in labels["io.neuron-torch.pins"].split()
    for name, version in cell["apt"].items():
        assert f"{name}={version}*" in labels["io.neuron-torch.apt-pins"].split()
    for key in ("title", "description", "version", "licenses"):
        assert labels.get(f"org.opencontainers.image.{key}"), f"OCI label org.opencontainers.image.{key} missing"
