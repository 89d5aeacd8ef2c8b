"""The README's quick start, read from README.md (so the test fails when the README drifts) and run as written in a
copy of the release, with the real indexes, apt repository and base images swapped for the test bed through the
mirror settings only (NEURON_TORCH_MIRROR: the fixture indexes of the real release's packages, served over HTTP on a
free loopback port; the test bed's signed apt repository and its key; [images] mapping `ubuntu:26.04` to the test
bed's Ubuntu 26.04 twin, as a user's registry mirror serves it), nothing else.

What runs as written: the set-up's `neuron-torch matrix`, every `neuron-torch lock` and `check` step, path B's `build
image` (the real default cell's image, on the 26.04 twin: its tags, labels, the lock it installed and every pin
checked inside; the only image build of the 2.14 family and the distro's Python 3.14, so a full build), `build ami`
(with a stand-in `packer` first on PATH that logs what it is handed, and the Ansible controller's bin on PATH as the
README says), `bundle` (path D: the real default cell's
wheels from the fixture indexes, its apt packages from the test bed's `resolute` suite), and `sudo
nt-bundle/install.sh` as user `ubuntu` with the network off, on the Ubuntu 26.04 twin given the traits of Canonical's
AMIs that install.sh meets ([ami.python3]: python3 but no python3-venv, which install.sh refuses before installing
anything; [ami.sudo]) and then with python3-venv, as the README's step asks. Path A's two `ansible-playbook` lines,
with the Ansible controller's bin on PATH as the README's note says, against an inventory.ini that lists one SSH host
of the Ubuntu 26.04 twin (tests/testbed/hosts.py: an AMI's traits, systemd 262 on a cgroup2 subfolder of its own,
host keys checked) and a group_vars/all.json beside it holding the host's login and the mirror's Ansible variables
(docs/mirrors.md: the same apt repository, key and indexes as mirror.toml): provision.yml converges the real default
cell; verify.yml fails at the device stage, naming the missing Neuron device, after the environment stage passed.
Field items, only parsed here: path B's `docker run --device=/dev/neuron0` (needs a Trainium device: test_image.py
runs the test cell's image with the README's `--device=` flags on fixture device nodes and the simulated device) and
path C's AMI launch (AWS).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from neuron_torch.cli import build_parser
from neuron_torch.matrix import Matrix
from tests import REPO_ROOT
from tests.integration.test_fleet import recap
from tests.integration.test_image import ENVIRONMENT_CHECK
from tests.testbed import hosts
from tests.testbed.baseimages import twin_base
from tests.testbed.fixture_indexes import build_release_indexes
from tests.testbed.harness import DOCKER, built_testbed, require_docker

REPO = REPO_ROOT
BIN = Path(sys.executable).parent
PROGRAMS = ("neuron-torch", "ansible-playbook", "docker", "sudo", "verify-device", "/opt/neuron-venv/bin/verify-device")


def quick_start() -> tuple[list[str], dict[str, list[str]]]:
    """The set-up block's commands and each path's numbered commands (the first command of each step)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start: a user's paths", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the quick start lost its set-up block"
    setup = [line.split("#", 1)[0].strip() for line in block[1].splitlines()]
    paths: dict[str, list[str]] = {}
    for letter, body in re.findall(r"^\*\*([A-D])\. [^*]+\*\*\n\n(.*?)(?=^\*\*|\Z)", section, re.M | re.S):
        steps = re.findall(r"^(\d+)\. (.*?)(?=^\d+\. |^\S|\Z)", body, re.M | re.S)
        assert [int(n) for n, _ in steps] == list(range(1, len(steps) + 1)), f"path {letter}: steps out of order"
        commands = []
        for number, step in steps:
            found = re.search(rf"`((?:[A-Z_]+=\S+ )*(?:{'|'.join(PROGRAMS)})\b[^`]*)`", " ".join(step.split()))
            assert found, f"path {letter}, step {number} names no command: {step!r}"
            commands.append(found[1])
        paths[letter] = commands
    return [line for line in setup if line], paths


def test_the_quick_start_has_its_four_paths_on_the_default_cell(matrix: Matrix) -> None:
    setup, paths = quick_start()
    assert sorted(paths) == ["A", "B", "C", "D"]
    assert "neuron-torch matrix" in setup
    parser = build_parser()
    for letter, commands in paths.items():
        for command in commands:
            words = shlex.split(command)
            if words[0] == "neuron-torch":
                parser.parse_args(words[1:])  # exits 2 (failing the test) on an option the CLI does not take
                cell = words[words.index("--cell") + 1]
                assert cell == matrix.release.default_cell, f"path {letter}: {command}"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files without logging each request to stderr (a failing test's output is the test's, not the log's)."""

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve `folder` over HTTP on a free loopback port, as a mirror serves it (build containers reach it there)."""
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, matrix: Matrix) -> Iterator[tuple[Path, dict[str, str]]]:
    """A copy of the checkout without locks, and the environment of a user whose mirror is the fixture indexes (served
    over HTTP), the test bed's apt repository and its Ubuntu twins as the base images."""
    root = tmp_path_factory.mktemp("quickstart")
    copy = root / "neuron-torch"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True, text=True)
    for name in filter(None, tracked.stdout.split("\0")):  # the checkout a user has: tracked files only
        if (REPO / name).is_file() and "/locks/" not in name:
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, copy / name)
    served = root / "indexes"
    indexes = build_release_indexes(matrix, served)
    bed = tomllib.loads(built_testbed().mirror_file.read_text())
    apt, images = bed["apt"], bed["images"]  # the test bed's signed repository and key; its Ubuntu twins
    tools = root / "bin"
    tools.mkdir()
    packer = tools / "packer"  # a stand-in: `build ami` checks its version, then hands it the build
    packer.write_text(
        f'#!/bin/sh\n[ "$1" = version ] && echo "Packer v1.11.2" && exit 0\necho "$@" >> {root}/packer.log\n'
    )
    packer.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_TORCH_", "PIP_", "UV_"))}
    with serve(served) as url:
        mirror = copy / "mirror.toml"
        mirror.write_text(
            "[apt]\n" + "".join(f'{key} = "{value}"\n' for key, value in apt.items())
            + "[indexes]\n" + "".join(f'{name} = "{url}/simple/{name}/"\n' for name in indexes)
            + "[images]\n" + "".join(f'"{image}" = "{twin}"\n' for image, twin in images.items())
        )  # fmt: skip
        env.update(NEURON_TORCH_MIRROR=str(mirror), PATH=f"{tools}:{BIN}:{env['PATH']}")
        yield copy, env


def run(command: str, project: tuple[Path, dict[str, str]], path: Path | None = None, returncode: int = 0) -> str:
    """Run `command` as a user types it in the copy (`path` first on PATH); it must exit `returncode`."""
    copy, env = project
    env = {**env, "PATH": f"{path}:{env['PATH']}"} if path else env
    result = subprocess.run(command, shell=True, cwd=copy, env=env, capture_output=True, text=True, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == returncode, f"{command}\n{output[-8000:]}"
    assert "Traceback" not in output, output
    return output


def test_the_neuron_torch_steps_run_as_written(project: tuple[Path, dict[str, str]]) -> None:
    copy, _ = project
    _, paths = quick_start()
    run("neuron-torch matrix", project)
    lock, check = paths["A"][0], paths["A"][1]
    assert paths["B"][0] == paths["C"][0] == paths["D"][0] == lock  # every path locks the same way
    run(lock, project)
    cell = shlex.split(lock)[-1]
    assert (copy / "constraints" / "locks" / f"{cell}.txt").is_file()
    assert "a sound, sealed lock" in run(check, project)
    controller = REPO / ".venv-ansible" / "bin"  # the README's ~/.venvs/ansible/bin, on PATH as path C says
    if not (controller / "ansible-playbook").is_file():
        pytest.skip(f"{controller}/ansible-playbook is missing: run scripts/dev-setup.sh (it makes .venv-ansible)")
    run(paths["C"][1], project, path=controller)
    log = (copy.parent / "packer.log").read_text()
    build = [line for line in log.splitlines() if line.startswith("build ")]
    assert len(build) == 1 and "-var=region=us-east-1" in build[0] and f"{cell}.pkrvars.hcl" in build[0], log
    assert f"-var=ansible_playbook_command={controller / 'ansible-playbook'}" in build[0].split(), log
    assert f"-var=testinfra_python={controller / 'python'}" in build[0].split(), log


def test_the_image_path_builds_as_written(project: tuple[Path, dict[str, str]], matrix: Matrix) -> None:
    """Path B's `build image`, as written, for the real default cell: its base `ubuntu:26.04` comes through the mirror
    settings' [images] (the test bed's Ubuntu 26.04 twin), as a registry mirror of a user's would serve it."""
    require_docker()
    copy, _ = project
    _, paths = quick_start()
    lock, build = paths["B"][0], paths["B"][1]
    cell = matrix.cell(shlex.split(lock)[-1])
    twin = twin_base(cell.os.id)  # a no-op where `scripts/testbed.sh build` made it
    run(lock, project)
    tags = [f"neuron-torch:{cell.id}", "neuron-torch:latest"]
    try:
        assert f"built {', '.join(tags)}" in run(build, project)
        inspect = subprocess.run([DOCKER, "image", "inspect", tags[0], tags[1]], capture_output=True, text=True)
        images = json.loads(inspect.stdout)
        assert images[0]["Id"] == images[1]["Id"], "both tags name the one image"
        labels = images[0]["Config"]["Labels"]
        assert labels["io.neuron-torch.cell"] == cell.id and labels["io.neuron-torch.release"] == matrix.release.name
        assert labels["org.opencontainers.image.base.name"] == twin != cell.os.base_image  # through [images]
        assert labels["io.neuron-torch.pins"] == " ".join(f"{n}=={v}" for n, v in cell.pins.items())
        inside = [DOCKER, "run", "--rm", "--network", "none", "--entrypoint"]
        built = subprocess.run([*inside, "cat", tags[0], "/etc/neuron-torch/lock.txt"], capture_output=True, text=True)
        entries = (copy / "constraints" / "locks" / f"{cell.id}.txt").read_text().splitlines()
        assert [x for x in built.stdout.splitlines() if not x.startswith("--")] == [
            x for x in entries if not x.startswith("--")
        ]  # the lock step 1 wrote, as the image installed it
        check = subprocess.run([*inside, "python", tags[0], "-c", ENVIRONMENT_CHECK], capture_output=True, text=True)
        assert "problems []" in check.stdout, check.stdout + check.stderr  # verify-device's pin check, every pin
        assert f"neuronx-cc=={cell.pins['neuronx-cc']}+" in check.stdout, check.stdout
    finally:
        subprocess.run([DOCKER, "image", "rm", *tags], capture_output=True)  # the tags; the build cache stays


def test_the_ansible_path_converges_and_verifies_as_written(project: tuple[Path, dict[str, str]]) -> None:
    """Path A as written on a host of the real default cell's OS, the Ubuntu 26.04 twin: the converge passes, and
    verify.yml, with the default device (neuron), fails at the device stage after the environment stage passed."""
    controller = REPO / ".venv-ansible" / "bin"  # the README's ~/.venvs/ansible/bin
    if not (controller / "ansible-playbook").exists():
        pytest.skip(f"{controller}/ansible-playbook is missing: run scripts/dev-setup.sh (it makes .venv-ansible)")
    require_docker()
    copy, _ = project
    _, paths = quick_start()
    lock, _, provision, verify = paths["A"]
    assert all(" ansible-playbook -i inventory.ini " in f" {c}" for c in (provision, verify)), paths["A"]
    cell = shlex.split(lock)[-1]
    run(lock, project)
    try:
        fleet = hosts.Fleet(copy.parent / "hosts", f"nt-quickstart-{os.getpid()}", twin_base("ubuntu26.04"))
    except hosts.HostError as error:
        pytest.fail(str(error))
    try:
        try:
            host = fleet.start("trn2-1")  # systemd 262 on a cgroup2 subfolder of its own (hosts.py)
        except hosts.HostError as error:
            pytest.fail(str(error))
        # The user's inventory: the host, and beside it the login and the mirror (docs/mirrors.md, Ansible column).
        (copy / "inventory.ini").write_text(f"[trn2]\n{host.name} ansible_host=127.0.0.1 ansible_port={host.port}\n")
        mirror = tomllib.loads((copy / "mirror.toml").read_text())
        mirror_vars = {
            "neuron_repo_url": mirror["apt"]["url"],
            "neuron_repo_key_url": mirror["apt"]["key_url"],
            "neuron_repo_key_fingerprint": mirror["apt"]["key_fingerprint"],
            "python_env_index_overrides": mirror["indexes"],
        }
        login = json.loads(fleet.inventory().read_text())["all"]["vars"]  # the fleet's: user, key, known_hosts
        (copy / "group_vars").mkdir()
        (copy / "group_vars" / "all.json").write_text(json.dumps({**login, **mirror_vars}, indent=2))
        converged = run(provision, project, path=controller)
        assert recap(converged, host.name)["failed"] == 0 and recap(converged, host.name)["changed"] > 0, converged
        assert f"verify-device not run on {host.name}" in converged  # no /dev/neuron0: installed, not run
        installed = fleet.exec(host.name, "cat", "/etc/neuron-torch/lock.txt").stdout.decode()
        assert installed == (copy / "constraints" / "locks" / f"{cell}.txt").read_text()  # step 1's lock, as written
        verified = run(verify, project, path=controller, returncode=2)
        state = copy / ".neuron-torch"
        summary = json.loads((state / "verify-summary.json").read_text())
        assert [(r["host"], r["verdict"], r["stage"]) for r in summary["hosts"]] == [(host.name, "fail", "device")]
        assert "/dev/neuron" in summary["hosts"][0]["message"], verified[-6000:]
        report = json.loads((state / "reports" / f"{host.name}.json").read_text())
        stages = {stage["name"]: stage["status"] for stage in report["stages"]}
        assert stages["environment"] == "pass" and stages["device"] == "fail", stages
        assert report["exit_code"] == 3, report["exit_code"]  # verify-device's "the device is missing"
    finally:
        fleet.remove()


# The Ubuntu 26.04 twin given what install.sh meets on Canonical's AMIs (tests/testbed/traits.toml): python3 and no
# python3-venv ([ami.python3]), a user `ubuntu` with passwordless sudo ([ami.sudo], hosts.py's sudoers file); and the
# same with the python3-venv the README's step 3 asks for (its .debs fetched beside the first stage's install, so one
# `apt-get update` serves both). Docker's layer cache makes every build after the first free.
TARGETS = """\
FROM {base} AS ami
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 sudo >/dev/null \\
 && mkdir -p /var/cache/venv-debs/partial \\
 && apt-get install -y -qq --download-only --no-install-recommends -o Dir::Cache::archives=/var/cache/venv-debs \\
      python3-venv >/dev/null \\
 && rm -rf /var/lib/apt/lists/* /var/cache/venv-debs/partial \\
 && printf '{user} ALL=(ALL) NOPASSWD:ALL\\n' >{sudoers} && chmod 0440 {sudoers}
FROM ami AS venv
RUN dpkg -i /var/cache/venv-debs/*.deb >/dev/null
"""


def target_image(stage: str) -> str:
    tag = f"neuron-torch-quickstart15:ubuntu26.04-{stage}"
    dockerfile = TARGETS.format(base=twin_base("ubuntu26.04"), user=hosts.USER, sudoers=hosts.SUDOERS)
    subprocess.run(
        [DOCKER, "build", "--network=host", "--quiet", "--target", stage, "--tag", tag, "-"],
        input=dockerfile.encode(), check=True, stdout=subprocess.DEVNULL,
        env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    return tag


def test_the_bundle_path_runs_as_written_and_installs_offline(project: tuple[Path, dict[str, str]]) -> None:
    copy, _ = project
    _, paths = quick_start()
    lock, make, install, verify = paths["D"]
    run(lock, project)
    run(make, project)
    out = copy / shlex.split(make)[shlex.split(make).index("--out") + 1]
    manifest = json.loads((out / "manifest.json").read_text())
    cell = shlex.split(lock)[-1]
    assert manifest["cell"] == cell and manifest["os"]["codename"] == "resolute"
    assert sorted(p["name"] for p in manifest["apt"]["packages"]) == [
        "aws-neuronx-collectives", "aws-neuronx-runtime-lib", "aws-neuronx-tools",
    ]  # fmt: skip
    wheels = {w["name"]: w["version"] for w in manifest["wheels"]}
    assert wheels["torch"].endswith("+cpu") and wheels["torch-neuronx"].startswith(cell.split("-")[0])

    require_docker()
    assert install == "sudo nt-bundle/install.sh", install
    versions = "import torch, torch_neuronx; print(torch.__version__, torch_neuronx.__version__)"
    check = f"/opt/neuron-venv/bin/python -c '{versions}'"
    script = f"{install} && {check} && /opt/aws/neuron/bin/neuron-ls --json-output"
    mount = ["-v", f"{out}:/home/{hosts.USER}/nt-bundle:ro", "-w", f"/home/{hosts.USER}", "--user", hosts.USER]
    offline = [DOCKER, "run", "--rm", "--network", "none", *mount]
    # Canonical's AMI as it is: install.sh refuses before installing anything, naming the package to add.
    refused = subprocess.run(
        [*offline, target_image("ami"), "sh", "-c", f"{install}; echo exit=$?; dpkg -s aws-neuronx-tools"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    output = refused.stdout + refused.stderr
    assert "exit=1" in output and "install python3.14-venv" in output and "nothing was installed" in output, output
    assert "package 'aws-neuronx-tools' is not installed" in output, output
    # With python3-venv, as step 3 asks: the bundle installs offline, as written.
    done = subprocess.run(
        [*offline, target_image("venv"), "sh", "-c", script], capture_output=True, text=True, timeout=600
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert f"{wheels['torch']} {wheels['torch-neuronx']}" in output and "[]" in output.split(), output[-2000:]
    # Step 4 as written, after step 3: the environment stage passes on the bundle's venv (the twin's torch is a
    # fixture, so nothing computes); the device stage fails naming the missing Neuron device (exit 3). The same
    # bundle path with a real torch passes every stage: test_bundle.py's debian12 run.
    verified = subprocess.run(
        [*offline, target_image("venv"), "sh", "-c", f"{install} >/dev/null 2>&1 && {verify}"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    output = verified.stdout + verified.stderr
    assert verified.returncode == 3, output[-4000:]
    assert re.search(r"PASS +environment .* 0 mismatched", output), output[-4000:]
    assert re.search(r"FAIL +device .*/dev/neuron", output), output[-4000:]
