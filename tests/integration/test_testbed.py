"""The hermetic test bed: fixtures with the real names, routing traps, caching, the signed apt repo over loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from neuron_torch.lockfile import read_lock
from neuron_torch.matrix import load_matrix
from tests.testbed import aptrepo, cache, index, server
from tests.testbed.harness import BASE, CELL, DOCKER, ROOT, TEST_MATRIX, built_testbed, docker, require_docker
from tests.testbed.wheels import build_wheel

URL = "http://127.0.0.1:38080"


def fetch(path: str) -> str:
    with urllib.request.urlopen(f"{URL}{path}", timeout=10) as response:
        return str(response.read().decode())


def test_deb_versions_carry_a_hash_suffix_matched_by_the_pins() -> None:
    matrix = load_matrix(TEST_MATRIX)
    for package in matrix.apt.packages:
        version = aptrepo.deb_version(package)
        assert version.startswith(package.version + "-") and len(version.rsplit("-", 1)[1]) == 9
        assert package.apt_pin == f"{package.name}={package.version}*"
        assert aptrepo.deb_version(package) == version


def test_fixtures_are_byte_identical_between_builds(tmp_path: Path) -> None:
    matrix = load_matrix(TEST_MATRIX)
    for wheel in index.neuron_wheels(matrix) + index.trap_wheels(matrix):
        assert build_wheel(wheel, tmp_path / "a").read_bytes() == build_wheel(wheel, tmp_path / "b").read_bytes()
    if subprocess.run(["which", "dpkg-deb"], capture_output=True).returncode == 0:
        deb = aptrepo.fixture_debs(matrix.apt)[0]
        first = aptrepo.build_deb(deb, tmp_path / "w1", tmp_path / "d1").read_bytes()
        assert first == aptrepo.build_deb(deb, tmp_path / "w2", tmp_path / "d2").read_bytes()


def test_cache_key_follows_the_inputs() -> None:
    assert cache.key("a", code=["aptrepo.py"]) == cache.key("a", code=["aptrepo.py"])
    assert cache.key("a", code=["aptrepo.py"]) != cache.key("b", code=["aptrepo.py"])
    assert cache.key("a", code=["aptrepo.py"]) != cache.key("a", code=["index.py"])


def test_build_serves_the_apt_repo_and_the_indexes() -> None:
    bed = built_testbed()
    assert f"apt repository  {URL}/apt" in bed.output
    for name in ("neuron", "pytorch-cpu", "pypi"):
        assert f"{URL}/simple/{name}/" in bed.output
    assert "torch-neuronx-2.13.3.0.1871" not in fetch("/simple/pypi/torch-neuronx/")
    assert "torch_neuronx-2.13.3.0.1871-py3-none-any.whl" in fetch("/simple/neuron/torch-neuronx/")
    key = fetch("/apt/testbed-archive-key.asc")
    assert key.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    assert "PRIVATE" not in key
    for codename in ("bookworm", "noble", "resolute"):
        assert "BEGIN PGP SIGNED MESSAGE" in fetch(f"/apt/dists/{codename}/InRelease")
    packages = fetch("/apt/dists/bookworm/main/binary-amd64/Packages")
    for package in bed.matrix.apt.packages:
        assert f"Package: {package.name}\n" in packages
        assert f"Version: {aptrepo.deb_version(package)}\n" in packages


def test_the_traps_are_served_and_routing_never_picks_them() -> None:
    bed = built_testbed()
    # The traps exist (so the routing test below is not vacuous) ...
    assert "torch_neuronx-1.0-py3-none-any.whl" in fetch("/simple/pypi/torch-neuronx/")
    assert "torch-2.13.0-py3-none-any.whl" in fetch("/simple/pypi/torch/")
    assert "nvidia_cublas_cu12" in fetch("/simple/pypi/nvidia-cublas-cu12/")
    # ... and every test cell's lock takes each package from its own index.
    for cell in bed.matrix.cells:
        lock = read_lock(cell.lock_path)
        versions = {p.name: p.version for p in lock.packages}
        assert versions["torch"] == "2.13.0+cpu"
        assert versions["torch-neuronx"] == "2.13.3.0.1871"
        assert not any(name.startswith("nvidia") for name in versions)
        for package in lock.packages:
            assert package.index_url == bed.matrix.index_for(package.name).url, package


def test_real_cpu_torch_is_locked_on_python_311() -> None:
    bed = built_testbed()
    if not index.real_torch_wheels(bed.matrix):
        pytest.skip("no real CPU torch wheel in /opt/wheels on this machine")
    torch = read_lock(bed.matrix.cell(CELL).lock_path).package("torch")
    assert torch is not None
    assert len(torch.hashes) == 2  # the real cp311 wheel and the py3-none-any fixture; pip picks cp311
    assert read_lock(bed.matrix.cell(CELL).lock_path).package("sympy") is not None


def test_second_build_reuses_everything() -> None:
    built_testbed()
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "tests.testbed", "build", "--bases", "none"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    elapsed = time.monotonic() - started
    assert "built in" not in result.stdout, result.stdout
    assert elapsed < 20, f"a cached build took {elapsed:.1f} s"
    status = subprocess.run([sys.executable, "-m", "tests.testbed", "status"], cwd=ROOT, capture_output=True, text=True)
    assert status.returncode == 0 and "serving on http://127.0.0.1:38080" in status.stdout


def test_a_second_test_bed_refuses_a_port_another_one_serves(tmp_path: Path) -> None:
    # Another checkout's test bed on the same port must not pass for this one (its key and locks differ).
    built_testbed()
    www = tmp_path / "www"
    www.mkdir()
    with pytest.raises(SystemExit, match=r"another server already answers on http://127\.0\.0\.1:38080"):
        server.start(www, tmp_path / "server.pid", tmp_path / "server.log")
    assert not (tmp_path / "server.pid").exists()
    assert server.status(www, tmp_path / "server.pid") is None
    status = subprocess.run([sys.executable, "-m", "tests.testbed", "status"], cwd=ROOT, capture_output=True, text=True)
    assert status.returncode == 0 and "serving on http://127.0.0.1:38080" in status.stdout


APT_SCRIPT = """set -e
mkdir -p /etc/apt/keyrings
gpg --dearmor -o /etc/apt/keyrings/neuron.gpg < /key.asc
. /etc/os-release
echo "deb [signed-by=/etc/apt/keyrings/neuron.gpg] http://127.0.0.1:38080/apt $VERSION_CODENAME main" \
    > /etc/apt/sources.list.d/neuron.list
apt-get -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=/etc/apt/sources.list.d update
apt-get install -y --no-install-recommends {pins}
/opt/aws/neuron/bin/neuron-ls --json-output
"""


def _apt_in_base(key: Path) -> subprocess.CompletedProcess[str]:
    bed = built_testbed()
    pins = " ".join(p.apt_pin for p in bed.matrix.apt.scoped("image"))
    return docker(
        "run", "--rm", "--network", "host", "-v", f"{key}:/key.asc:ro", BASE,
        "bash", "-c", APT_SCRIPT.format(pins=pins), check=False,
    )  # fmt: skip


def test_apt_installs_the_pinned_fixtures_with_the_right_key() -> None:
    require_docker()
    bed = built_testbed()
    result = _apt_in_base(bed.www / "apt" / aptrepo.KEY_FILE)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("[]")


def test_a_wrong_apt_key_is_refused(tmp_path: Path) -> None:
    require_docker()
    built_testbed()
    fingerprint = aptrepo.make_key(tmp_path / "gnupg", "someone else <other@127.0.0.1>")
    other = aptrepo.export_key(tmp_path / "gnupg", fingerprint, tmp_path / "other.asc")
    result = _apt_in_base(other)
    assert result.returncode != 0
    assert "NO_PUBKEY" in result.stderr or "not signed" in result.stderr, result.stderr


def test_docker_buildkit_reaches_the_testbed_with_network_host(tmp_path: Path) -> None:
    require_docker()
    built_testbed()
    (tmp_path / "Dockerfile").write_text(
        f'FROM {BASE}\nRUN python3 -c "import urllib.request as u; '
        f"print(u.urlopen('{URL}/simple/neuron/').status)\" > /status\n"
    )
    env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    docker(
        "build", "--network", "host", "--progress", "plain", "-t", "neuron-torch-testbed-probe", str(tmp_path), env=env
    )
    assert docker("run", "--rm", "neuron-torch-testbed-probe", "cat", "/status").stdout.strip() == "200"
    docker("rmi", "neuron-torch-testbed-probe", check=False)
    assert Path(DOCKER).exists()
