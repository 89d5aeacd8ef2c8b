"""Unit tests of neuron_smoke.host: the IMDSv2 instance-type lookup (urlopen stubbed: no network), the container
detection and its override, and the host facts."""

from __future__ import annotations

import io
import os
import urllib.request
from typing import Any

import pytest

from neuron_smoke import host


class FakeImds:
    """Stands in for urllib.request.urlopen: the token for the PUT, then the instance type."""

    def __init__(self, instance_type: str = "trn2.48xlarge", error: Exception | None = None) -> None:
        self.instance_type, self.error = instance_type, error
        self.requests: list[urllib.request.Request] = []

    def __call__(self, request: urllib.request.Request, timeout: float) -> Any:
        assert timeout == host.IMDS_TIMEOUT_S
        self.requests.append(request)
        if self.error is not None:
            raise self.error
        body = "the-token" if request.get_method() == "PUT" else self.instance_type
        return io.BytesIO(body.encode())


def test_imds_v2_token_then_instance_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEURON_SMOKE_IMDS", raising=False)
    imds = FakeImds("trn2.48xlarge\n")
    monkeypatch.setattr(urllib.request, "urlopen", imds)
    assert host.instance_type_from_imds() == "trn2.48xlarge"
    token, query = imds.requests
    assert (token.get_method(), token.full_url) == ("PUT", f"{host.IMDS}/api/token")
    assert token.get_header("X-aws-ec2-metadata-token-ttl-seconds") == "60"
    assert query.full_url == f"{host.IMDS}/meta-data/instance-type"
    assert query.get_header("X-aws-ec2-metadata-token") == "the-token"


@pytest.mark.parametrize("imds", [FakeImds(""), FakeImds(error=OSError("unreachable")), FakeImds(error=ValueError())])
def test_no_instance_type_off_ec2(monkeypatch: pytest.MonkeyPatch, imds: FakeImds) -> None:
    monkeypatch.delenv("NEURON_SMOKE_IMDS", raising=False)
    monkeypatch.setattr(urllib.request, "urlopen", imds)
    assert host.instance_type_from_imds() is None


def test_imds_off_asks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_SMOKE_IMDS", "0")
    imds = FakeImds()
    monkeypatch.setattr(urllib.request, "urlopen", imds)
    assert host.instance_type_from_imds() is None and imds.requests == []


def test_container_detection_and_its_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_SMOKE_CONTAINER", "1")
    assert host.in_container() is True
    monkeypatch.setenv("NEURON_SMOKE_CONTAINER", "0")
    assert host.in_container() is False
    monkeypatch.setenv("NEURON_SMOKE_CONTAINER", "maybe")  # not an override: detection decides
    for marker in ("/.dockerenv", "/run/.containerenv"):
        monkeypatch.setattr(os.path, "exists", lambda path, marker=marker: path == marker)
        assert host.in_container() is True
    monkeypatch.setattr(os.path, "exists", lambda path: False)
    assert host.in_container() is False


def test_host_facts() -> None:
    facts = host.host_facts()
    assert set(facts) == {"hostname", "platform", "machine", "python", "cpus"}
    assert facts["cpus"] == os.cpu_count() and facts["machine"] == os.uname().machine


def test_interpreter_names_the_version_and_the_file_behind_a_venv_link(tmp_path: Any, monkeypatch: Any) -> None:
    real = tmp_path / "pyenv" / "python3.12"
    real.parent.mkdir()
    real.write_text("")
    link = tmp_path / "venv" / "python"
    link.parent.mkdir()
    link.symlink_to(real)
    monkeypatch.setattr(host.sys, "executable", str(link))
    monkeypatch.setattr(host.platform, "python_version", lambda: "3.12.1")
    assert host.interpreter() == f"3.12.1 at {real}"
