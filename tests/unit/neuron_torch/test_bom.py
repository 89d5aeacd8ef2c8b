"""neuron_torch.bom without Docker (a stand-in `docker` script): the label is the sha256 of the image's SHA256SUMS,
added by a configuration-only build `FROM <image id>` under every tag; an image without a bill of materials is named.
The real image's label is checked in tests/integration/test_bom.py."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from neuron_torch.bom import LABEL, SUMS, label_image, parse_sums
from neuron_torch.errors import NeuronTorchError

SUMS_TEXT = f"{'a' * 64}  version-info.json\n"
STAND_IN = """#!/bin/sh
echo "$*" >> "$LOG"
case "$1" in
  run) [ -n "$NO_BOM" ] && { echo "cat: $SUMS: No such file or directory" >&2; exit 1; }; printf '%s' "$SUMS_TEXT";;
  image) echo sha256:feed;;
  build) cat >> "$LOG"; echo sha256:beef;;
esac
"""


@pytest.fixture
def docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "docker"
    script.write_text(STAND_IN)
    script.chmod(0o755)
    for name, value in {"LOG": str(tmp_path / "log"), "SUMS_TEXT": SUMS_TEXT, "SUMS": SUMS, "NO_BOM": ""}.items():
        monkeypatch.setenv(name, value)
    return script


def test_the_label_is_the_digest_of_sha256sums_under_every_tag(docker: Path, tmp_path: Path) -> None:
    digest = label_image(str(docker), ["neuron-torch:c", "neuron-torch:latest"])
    assert digest == "sha256:" + hashlib.sha256(SUMS_TEXT.encode()).hexdigest()
    log = (tmp_path / "log").read_text()
    assert f"run --rm --network none --entrypoint cat neuron-torch:c {SUMS}" in log
    assert "build --quiet --tag neuron-torch:c --tag neuron-torch:latest -" in log
    assert f"FROM sha256:feed\nLABEL {LABEL}={digest}\n" in log


def test_an_image_without_a_bill_of_materials_is_named(docker: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_BOM", "1")
    with pytest.raises(NeuronTorchError, match=f"neuron-torch:c holds no {SUMS}") as error:
        label_image(str(docker), ["neuron-torch:c"])
    assert error.value.exit_code == 1


def test_sha256sums_parse_as_names_to_digests() -> None:
    assert parse_sums(f"{'a' * 64}  version-info.json\n{'b' * 64}  sbom-apt.cdx.json\n") == {
        "version-info.json": "a" * 64,
        "sbom-apt.cdx.json": "b" * 64,
    }
