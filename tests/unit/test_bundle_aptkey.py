"""src/neuron_torch/aptkey.sh, the one apt key fingerprint check: its verdicts, and that the image build, the
neuron_repo role and the bundle all run it (none keeps a check of its own). Each consumer's own refusal of a wrong
fingerprint is tested beside it: test_image (keyring stage), test_ansible (the role's task), test_bundle."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from neuron_torch.bundle import APT_KEY_SH
from tests import REPO_ROOT
from tests.testbed import aptrepo

REPO = REPO_ROOT


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    if not shutil.which("gpg"):
        pytest.skip("gpg is not installed (scripts/ci-prereqs.sh installs it)")
    folder = tmp_path_factory.mktemp("aptkey")
    fingerprint = aptrepo.make_key(folder / "gnupg")
    return aptrepo.export_key(folder / "gnupg", fingerprint, folder / "key.asc"), fingerprint


def check(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(APT_KEY_SH), *map(str, args)], capture_output=True, text=True, check=False)


def test_the_pinned_fingerprint_passes_and_the_keyring_is_written(key: tuple[Path, str], tmp_path: Path) -> None:
    path, fingerprint = key
    keyring = tmp_path / "neuron.gpg"
    spaced = " ".join(fingerprint[i : i + 4] for i in range(0, 40, 4)).lower()  # as publishers print it
    result = check("--expect", spaced, "--source", "https://example.invalid/key.asc", "--keyring", keyring, path)
    assert result.returncode == 0, result.stderr
    assert f"neuron apt key at https://example.invalid/key.asc: fingerprint(s) {fingerprint}" in result.stdout
    listed = subprocess.run(
        ["gpg", "--batch", "--show-keys", "--with-colons", str(keyring)], capture_output=True, text=True, check=True
    )
    assert f"fpr:::::::::{fingerprint}:" in listed.stdout
    assert not keyring.read_bytes().startswith(b"-----BEGIN"), "apt's signed-by keyring must be dearmored"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["neuron.gpg"]


def test_a_wrong_fingerprint_is_refused_and_nothing_is_written(key: tuple[Path, str], tmp_path: Path) -> None:
    path, fingerprint = key
    wrong = fingerprint[::-1]
    result = check("--expect", wrong, "--source", "https://example.invalid/key.asc", "--keyring", tmp_path / "k", path)
    assert result.returncode == 1
    assert (
        f"the apt key at https://example.invalid/key.asc has fingerprint(s) {fingerprint}, not the pinned {wrong}: "
        "refusing it" in result.stderr
    )
    assert list(tmp_path.iterdir()) == []


def test_no_pin_warns_and_a_file_without_a_key_is_refused(key: tuple[Path, str], tmp_path: Path) -> None:
    path, _ = key
    unpinned = check(path)
    assert unpinned.returncode == 0 and "no fingerprint is pinned" in unpinned.stderr
    junk = tmp_path / "junk.asc"
    junk.write_text("<html>not found</html>\n")
    refused = check("--expect", key[1], junk)
    assert refused.returncode == 1 and "holds no key" in refused.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [((), "the KEY file is missing"), (("--expect",), "--expect needs a value"), (("--what", "k"), "unknown option")],
)
def test_usage_errors_exit_2(args: tuple[str, ...], message: str) -> None:
    result = check(*args)
    assert result.returncode == 2 and message in result.stderr


def test_every_consumer_runs_the_one_check() -> None:
    """The Dockerfile, the neuron_repo role and the bundle run aptkey.sh; none reads fingerprints with gpg itself."""
    consumers = {
        "Dockerfile": "/usr/local/lib/neuron-torch/aptkey.sh --expect",
        "ansible/roles/neuron_repo/tasks/key.yml": "{{ neuron_repo_key_check }}",
        "src/neuron_torch/bundle.py": "str(APT_KEY_SH)",
    }
    for path, call in consumers.items():
        text = (REPO / path).read_text()
        assert call in text, f"{path} no longer runs aptkey.sh"
        assert "--show-keys" not in text and "fpr" not in text, f"{path} reads key fingerprints itself again"
    assert "src/neuron_torch/aptkey.sh" in (REPO / "ansible/roles/neuron_repo/defaults/main.yml").read_text()
    assert "!src/neuron_torch/aptkey.sh" in (REPO / ".dockerignore").read_text().splitlines()
