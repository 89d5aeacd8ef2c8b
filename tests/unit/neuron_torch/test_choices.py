"""neuron_torch.choices: the names the CLI offers are the ones the modules act on: each resolver is accepted by
`lock --resolver` (another is refused), each `build ami --only` name maps to a Packer source the templates declare
and build, and the mirror's environment variable is the one mirror_from_env reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from neuron_torch.choices import MIRROR_ENV_VAR, PACKER_SOURCES, RESOLVERS
from neuron_torch.cli import build_parser
from neuron_torch.mirror import mirror_from_env
from tests import REPO_ROOT


@pytest.mark.parametrize("resolver", RESOLVERS)
def test_lock_accepts_each_resolver(resolver: str) -> None:
    args = build_parser().parse_args(["lock", "--cell", "any", "--resolver", resolver])
    assert args.resolver == resolver


def test_lock_refuses_a_resolver_not_offered(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        build_parser().parse_args(["lock", "--cell", "any", "--resolver", "poetry"])
    assert raised.value.code == 2
    assert "invalid choice: 'poetry'" in capsys.readouterr().err


def test_each_packer_source_is_declared_and_built_by_the_templates() -> None:
    templates = "\n".join(path.read_text() for path in sorted((REPO_ROOT / "images").glob("*.pkr.hcl")))
    declared = {f"{kind}.{name}" for kind, name in re.findall(r'^source "([\w-]+)" "([\w-]+)"', templates, re.M)}
    built = set(re.findall(r'"source\.([\w.-]+)"', templates))
    for only, source in PACKER_SOURCES.items():
        assert source.split(".")[0] == only  # --only names the source's builder type
        assert source in declared and source in built, source
        assert build_parser().parse_args(["build", "ami", "--cell", "x", "--only", only]).only == only
    with pytest.raises(SystemExit):
        build_parser().parse_args(["build", "ami", "--cell", "x", "--only", "qemu"])


def test_the_mirror_variable_is_the_one_mirror_from_env_reads(tmp_path: Path) -> None:
    settings = tmp_path / "mirror.toml"
    settings.write_text('[apt]\nurl = "https://mirror.example/apt"\n')
    mirror = mirror_from_env({MIRROR_ENV_VAR: str(settings)})
    assert mirror is not None and mirror.apt_url == "https://mirror.example/apt"
    assert mirror_from_env({MIRROR_ENV_VAR: ""}) is None
    assert mirror_from_env({"OTHER": str(settings)}) is None
