"""molecule's default scenario (ansible/molecule/default): both Python routes of the test release converged in one
run on the Ubuntu twins, idempotence, each route's interpreter, the shared testinfra suite on each host.

Its own file, so that scripts/test.sh runs it as a unit of its own beside the rest of tests/test_ansible.py (the lanes
in tests/conftest.py): it is the longest Ansible run of the suite. Needs docker, the twins and the test bed (it skips,
saying why, without them); the helpers are tests/test_ansible.py's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.test_ansible import ANSIBLE, MOLECULE_CELL, UV_CELL, docker_ready, find_testbed, molecule_env, run, tool
from tests.test_ansible import test_release_vars as test_release_vars  # a fixture


def test_molecule_converges_both_python_routes_idempotently_and_passes_the_shared_testinfra_suite(
    test_release_vars: Path,
) -> None:
    """`molecule test` of the default scenario, two hosts converged in one run: the distro route
    (2.13-py3.13-ubuntu24.04 on the Ubuntu 24.04 twin) and the uv-standalone route (2.13-py3.13-ubuntu26.04 on the
    Ubuntu 26.04 twin, whose distro ships 3.14: uv from the pypi index with --require-hashes, the interpreter from the
    test bed's archive through the mirror settings' [python]). Both get python3 and sudo as Ubuntu's AMIs have them
    (traits.toml [ami.python3], [ami.sudo]); then idempotence (changed=0 on both), each venv's interpreter checked
    against its route, and the shared testinfra suite on each host. verify-device is installed, not run: the twin's
    fixture torch cannot run its stages (the scenario says so; the Packer docker build runs it on real torch). The
    fleet verdict is tests/test_fleet.py's, on SSH hosts."""
    docker_ready()
    folder = find_testbed()
    hosts = {MOLECULE_CELL: "neuron-torch-molecule-ubuntu2404-twin", UV_CELL: "neuron-torch-molecule-ubuntu2604-twin"}
    for cell in hosts:
        if not (folder / "locks" / f"{cell}.txt").is_file():
            pytest.skip(f"no lock of {cell} in {folder}/locks: run scripts/testbed.sh build")
    from tests.testbed.baseimages import twin_base

    scenario = (ANSIBLE / "molecule" / "default" / "molecule.yml").read_text()
    for os_id in ("ubuntu24.04", "ubuntu26.04"):
        assert f"image: {twin_base(os_id)}\n" in scenario  # the scenario's platform images are the twins
    release = json.loads(test_release_vars.read_text().split("\n", 2)[2])["neuron_release"]
    assert release["cells"][MOLECULE_CELL]["python_route"] == "distro"
    assert release["cells"][UV_CELL]["python_route"] == "uv-standalone"
    molecule = tool("molecule")
    env = molecule_env(folder)
    run([molecule, "destroy"], cwd=ANSIBLE, timeout=600, env=env)  # --destroy never also skips the first destroy
    result = run([molecule, "test", "--destroy", "never"], cwd=ANSIBLE, timeout=2700, env=env)  # a ceiling (1347 s)
    output = result.stdout + result.stderr
    try:
        assert result.returncode == 0, output[-12000:]
        for step in ("prepare", "converge", "idempotence", "verify"):
            assert re.search(rf"{step}\]?:? Executed: Successful", output), (
                f"molecule {step} did not run: {output[-6000:]}"
            )
        words = " ".join(output.split())
        for host in hosts.values():
            assert f"verify-device not run on {host}: neuron_verify_run=never" in words
            assert re.search(rf"{host}: =+ \d+ passed", output), output[-6000:]  # the shared suite's summary, per host
        # Each route's interpreter check ran on its own host (and was skipped on the other).
        routes = output.split("TASK [Check the distro route's venv runs the distribution's interpreter.]")[1]
        assert f"ok: [{hosts[MOLECULE_CELL]}]" in routes.split("TASK [")[0], routes[:2000]
        routes = output.split("TASK [Check the uv-standalone route's venv runs uv's standalone interpreter")[1]
        assert f"ok: [{hosts[UV_CELL]}]" in routes.split("TASK [")[0], routes[:2000]
    finally:
        run([molecule, "destroy"], cwd=ANSIBLE, timeout=600, env=env)
