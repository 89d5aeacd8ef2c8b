"""neuron_torch.verify_image without a registry (a stand-in `skopeo` on PATH): the policy file is read first, a
refusal by the policy is one line naming the policy, and a pulled image gives its manifest digest and its bill of
materials' label. The real signatures are checked in tests/integration/test_publish.py."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from neuron_torch.errors import NeuronTorchError
from neuron_torch.verify_image import verify_image

CONFIG = json.dumps({"config": {"Labels": {"io.neuron-torch.bom": "sha256:b0"}}})
MANIFEST = json.dumps(
    {"schemaVersion": 2, "config": {"digest": "sha256:" + hashlib.sha256(CONFIG.encode()).hexdigest()}}
)
STAND_IN = """#!/usr/bin/env python3
import os, sys
if os.environ["REFUSE"]:
    sys.exit('time="x" level=fatal msg="Source image rejected: A signature was required, but no signature exists"')
folder = sys.argv[-1].removeprefix("dir:")
open(os.path.join(folder, "manifest.json"), "w").write(os.environ["MANIFEST"])
open(os.path.join(folder, os.environ["CONFIG_NAME"]), "w").write(os.environ["CONFIG"])
"""


@pytest.fixture
def policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "bin").mkdir()
    skopeo = tmp_path / "bin" / "skopeo"
    skopeo.write_text(STAND_IN)
    skopeo.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    name = json.loads(MANIFEST)["config"]["digest"].removeprefix("sha256:")
    for key, value in {"REFUSE": "", "MANIFEST": MANIFEST, "CONFIG": CONFIG, "CONFIG_NAME": name}.items():
        monkeypatch.setenv(key, value)
    path = tmp_path / "policy.json"
    path.write_text('{"default": [{"type": "reject"}]}')
    return path


def test_a_pulled_image_gives_its_digest_and_its_bill_of_materials(policy: Path) -> None:
    digest = "sha256:" + hashlib.sha256(MANIFEST.encode()).hexdigest()
    verified = verify_image(f"r.io/neuron-torch@{digest}", policy)
    assert (verified.digest, verified.bom) == (digest, "sha256:b0")
    with pytest.raises(NeuronTorchError, match="pulled a manifest of digest"):
        verify_image(f"r.io/neuron-torch@sha256:{'0' * 64}", policy)


def test_a_refusal_names_the_policy(policy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REFUSE", "1")
    with pytest.raises(NeuronTorchError, match=f"r.io/neuron-torch:c is refused by {policy}: .*no signature") as error:
        verify_image("r.io/neuron-torch:c", policy)
    assert error.value.exit_code == 1


def test_a_missing_policy_is_a_usage_error(tmp_path: Path, policy: Path) -> None:
    with pytest.raises(NeuronTorchError, match=r"pass --policy a containers-policy\.json") as error:
        verify_image("r.io/neuron-torch:c", tmp_path / "none.json")
    assert error.value.exit_code == 2
