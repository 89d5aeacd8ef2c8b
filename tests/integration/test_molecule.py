"""molecule's default scenario (ansible/molecule/default): the uv-standalone route of the test release converged on
the Ubuntu 26.04 twin, idempotence, the route's interpreter, the shared testinfra suite. (The distro route's converge,
second run, interpreter and testinfra run are test_fleet.py's, over SSH on the Ubuntu 24.04 twin's systemd host.)

Its own file, so that scripts/test.sh runs it as a unit of its own beside the rest of test_ansible.py (the lanes
in tests/conftest.py): it is one of the suite's three long Ansible units. Needs docker, the twins and the test bed
(it skips, saying why, without them); the helpers are tests/integration/test_ansible.py's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.integration.test_ansible import ANSIBLE, UV_CELL, docker_ready, find_testbed, molecule_env, run, tool
from tests.integration.test_ansible import test_release_vars as test_release_vars  # a fixture


def test_molecule_converges_the_uv_standalone_route_idempotently_and_passes_the_shared_testinfra_suite(
    test_release_vars: Path,
) -> None:
    """`molecule test` of the default scenario: 2.13-py3.13-ubuntu26.04 on the Ubuntu 26.04 twin, whose distro ships
    3.14 (uv from the pypi index with --require-hashes, the interpreter from the test bed's archive through the mirror
    settings' [python]). It gets python3 and sudo as Ubuntu's AMIs have them (traits.toml [ami.python3],
    [ami.sudo]); then idempotence (changed=0), the venv's interpreter checked against its route, and the shared
    testinfra suite. verify-device is installed, not run: the twin's fixture torch cannot run its stages (the scenario
    says so; the Packer docker build runs it on real torch). The distro route is tests/integration/test_fleet.py's."""
    docker_ready()
    folder = find_testbed()
    host = "neuron-torch-molecule-ubuntu2604-twin"
    if not (folder / "locks" / f"{UV_CELL}.txt").is_file():
        pytest.skip(f"no lock of {UV_CELL} in {folder}/locks: run scripts/testbed.sh build")
    from tests.testbed.baseimages import twin_base

    scenario = (ANSIBLE / "molecule" / "default" / "molecule.yml").read_text()
    assert f"image: {twin_base('ubuntu26.04')}\n" in scenario  # the scenario's platform image is the twin
    release = json.loads(test_release_vars.read_text().split("\n", 2)[2])["neuron_release"]
    assert release["cells"][UV_CELL]["python_route"] == "uv-standalone"
    molecule = tool("molecule")
    env = molecule_env(folder)
    run([molecule, "destroy"], cwd=ANSIBLE, timeout=600, env=env)  # --destroy never also skips the first destroy
    result = run([molecule, "test", "--destroy", "never"], cwd=ANSIBLE, timeout=2700, env=env)  # a ceiling (774 s)
    output = result.stdout + result.stderr
    try:
        assert result.returncode == 0, output[-12000:]
        for step in ("prepare", "converge", "idempotence", "verify"):
            assert re.search(rf"{step}\]?:? Executed: Successful", output), (
                f"molecule {step} did not run: {output[-6000:]}"
            )
        words = " ".join(output.split())
        assert f"verify-device not run on {host}: neuron_verify_run=never" in words
        assert re.search(rf"{host}: =+ \d+ passed", output), output[-6000:]  # the shared suite's summary
        # The route's interpreter check ran on the host.
        routes = output.split("TASK [Check the uv-standalone route's venv runs uv's standalone interpreter")[1]
        assert f"ok: [{host}]" in routes.split("TASK [")[0], routes[:2000]
    finally:
        run([molecule, "destroy"], cwd=ANSIBLE, timeout=600, env=env)
