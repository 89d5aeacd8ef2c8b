"""neuron_cell.sbom run on this machine (its venv and its dpkg, as the image build runs it in the image): both SBOMs
are valid CycloneDX 1.6 (cyclonedx-python-lib's strict JSON schema validator), list what pip and dpkg list, carry
hashes and the lock's; version-info.json holds the cell's pins and the Neuron components present; the same install
writes the same bytes, and SHA256SUMS and the printed digest name them."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_cell import sbom
from tests import REPO_ROOT

CELL_RECORD = REPO_ROOT / "constraints" / "generated" / "2.14-py3.14-ubuntu26.04.json"


def schema_problem(text: str) -> object:
    validation = pytest.importorskip("cyclonedx.validation.json", reason="cyclonedx-python-lib is in the dev extras")
    from cyclonedx.schema import SchemaVersion

    return validation.JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("bom")
    lock = out.parent / "lock.txt"
    lock.write_text("pytest==9.9.9 \\\n    --hash=sha256:" + "a" * 64 + " \\\n    --hash=sha256:" + "b" * 64 + "\n")
    digest = sbom.write(out, json.loads(CELL_RECORD.read_text()), lock, host=False)
    return out, digest


def test_both_sboms_are_valid_cyclonedx(written: tuple[Path, str]) -> None:
    out, _ = written
    for name in ("sbom-venv.cdx.json", "sbom-apt.cdx.json"):
        document = json.loads((out / name).read_text())
        assert document["specVersion"] == sbom.SPEC_VERSION
        # This machine has hundreds of Debian packages, written by one function: a sample of them keeps the schema
        # check to a second (the image's whole apt SBOM is validated in tests/integration/test_bom.py).
        document["components"] = document["components"][:80]
        assert schema_problem(json.dumps(document)) is None, name


def test_an_invalid_document_is_refused_by_the_validator(written: tuple[Path, str]) -> None:
    document = json.loads((written[0] / "sbom-venv.cdx.json").read_text())
    document["components"][0]["hashes"] = [{"alg": "SHA-256", "content": "not hex"}]
    assert schema_problem(json.dumps(document)) is not None, "the validator must be able to fail"


def test_the_venv_sbom_is_what_pip_lists_with_hashes(written: tuple[Path, str]) -> None:
    listed = subprocess.run([sys.executable, "-m", "pip", "list", "--format", "json"], capture_output=True,
                            text=True, check=True).stdout  # fmt: skip
    expected = {(sbom.canonical(entry["name"]), entry["version"]) for entry in json.loads(listed)}
    components = json.loads((written[0] / "sbom-venv.cdx.json").read_text())["components"]
    assert {(c["name"], c["version"]) for c in components} == expected
    assert all(len(c["hashes"][0]["content"]) == 64 for c in components)
    pytest_entry = next(c for c in components if c["name"] == "pytest")
    assert pytest_entry["properties"] == [{"name": "neuron-torch:lock-sha256", "value": f"{'a' * 64} {'b' * 64}"}]
    assert pytest_entry["purl"] == f"pkg:pypi/pytest@{pytest_entry['version']}"


def test_the_apt_sbom_is_what_dpkg_lists(written: tuple[Path, str]) -> None:
    out = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package} ${Version}\n"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    expected = {tuple(line.split()[1:]) for line in out.splitlines() if line[1:2] == "i"}
    components = json.loads((written[0] / "sbom-apt.cdx.json").read_text())["components"]
    assert {(c["name"], c["version"]) for c in components} == expected
    assert all(c["purl"].startswith("pkg:deb/") and "?arch=" in c["purl"] for c in components)


def test_version_info_holds_the_cells_pins(written: tuple[Path, str]) -> None:
    record = json.loads(CELL_RECORD.read_text())
    info = json.loads((written[0] / "version-info.json").read_text())
    assert (info["cell"], info["release"], info["python"]) == (
        record["id"],
        record["release"],
        sbom.platform.python_version(),
    )
    assert info["pinned"]["pip"]["torch"] == record["torch"] and info["pinned"]["apt"] == record["apt"]
    assert info["pinned"]["apt_host"] == record["apt_host"]
    # This machine has no Neuron packages: none is claimed (an image lists runtime, collectives and tools).
    assert info["neuron"] == {} and "kernel" not in info and "base_image" not in info, "no base given: none claimed"


def test_an_image_records_its_base_and_the_digest_it_was_built_on(tmp_path: Path) -> None:
    digest = "sha256:" + "c" * 64
    argv = ["--out", str(tmp_path), "--cell-record", str(CELL_RECORD), "--lock", str(tmp_path / "no-lock.txt")]
    assert sbom.main([*argv, "--base-image", f"ubuntu:26.04@{digest}", "--base-digest", digest]) == 0
    info = json.loads((tmp_path / "version-info.json").read_text())
    assert info["base_image"] == {"reference": f"ubuntu:26.04@{digest}", "digest": digest}


def test_the_same_install_writes_the_same_bytes_and_the_digest_names_them(
    written: tuple[Path, str], tmp_path: Path
) -> None:
    out, digest = written
    again = sbom.write(tmp_path, json.loads(CELL_RECORD.read_text()), out.parent / "lock.txt", host=False)
    assert again == digest
    sums = (out / sbom.SUMS).read_text()
    assert hashlib.sha256(sums.encode()).hexdigest() == digest
    for line in sums.splitlines():
        value, name = line.split("  ")
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == value
        assert (tmp_path / name).read_bytes() == (out / name).read_bytes()


def test_a_host_also_records_its_kernel(tmp_path: Path) -> None:
    sbom.write(tmp_path, json.loads(CELL_RECORD.read_text()), None, host=True)
    info = json.loads((tmp_path / "version-info.json").read_text())
    assert info["kernel"] == sbom.platform.release() and isinstance(info["dkms"], list)


def test_a_missing_cell_record_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sbom.main(["--out", str(tmp_path / "out"), "--cell-record", str(tmp_path / "none.json")]) == 2
    error = capsys.readouterr().err.strip()
    assert "none.json" in error and len(error.splitlines()) == 1 and not (tmp_path / "out").exists()


def test_held_packages_are_installed_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Ansible roles hold the Neuron packages (dpkg's "hi"): they are listed; removed ones ("rc") are not."""
    listed = "ii\tbash\t5.2\tamd64\nhi\taws-neuronx-runtime-lib\t2.35.30.0\tamd64\nrc\told\t1.0\tamd64\n"
    answer = subprocess.CompletedProcess(args=[], returncode=0, stdout=listed)
    monkeypatch.setattr(sbom.subprocess, "run", lambda *args, **kwargs: answer)
    assert sbom.dpkg_packages() == [("aws-neuronx-runtime-lib", "2.35.30.0", "amd64"), ("bash", "5.2", "amd64")]
