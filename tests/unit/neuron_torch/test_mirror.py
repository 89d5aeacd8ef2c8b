"""Mirror settings: loading, applying to the matrix, redacting credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_torch.buildargs import build_args
from neuron_torch.cellinfo import cell_record
from neuron_torch.errors import NeuronTorchError
from neuron_torch.matrix import Matrix
from neuron_torch.mirror import (
    ENV_VAR,
    Mirror,
    Proxy,
    apply_mirror,
    load_mirror,
    mirror_from_env,
    redact,
)
from tests import REPO_ROOT

EXAMPLE = REPO_ROOT / "constraints" / "mirror.example.toml"
FINGERPRINT = "0123456789ABCDEF0123456789ABCDEF01234567"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mirror.toml"
    path.write_text(text)
    return path


def test_example_loads_and_applies(matrix: Matrix) -> None:
    mirror = load_mirror(EXAMPLE)
    mirrored = apply_mirror(matrix, mirror)
    assert mirrored.apt.url == mirror.apt_url
    assert {i.name: i.url for i in mirrored.indexes} == dict(mirror.indexes)
    # Routing is the release's: the mirror changes where, never which index serves a package.
    assert [i.serves for i in mirrored.indexes] == [i.serves for i in matrix.indexes]
    assert mirrored.index_for("torch").name == "pytorch-cpu"
    assert mirrored.cells == matrix.cells
    assert mirrored.python_install.install_mirror == mirror.python_install_mirror != ""


def test_python_downloads_reach_the_image_build_args(matrix: Matrix, tmp_path: Path) -> None:
    url = "https://m/uv/download-metadata.json"
    mirrored = apply_mirror(matrix, load_mirror(write(tmp_path, f'[python]\ndownloads_json_url = "{url}"\n')))
    cell = next(c for c in mirrored.cells if c.python_route == "uv-standalone")
    args = build_args(mirrored, cell_record(mirrored, cell))
    assert args["UV_PYTHON_DOWNLOADS_JSON_URL"] == url and args["UV_PYTHON_INSTALL_MIRROR"] == ""
    assert build_args(matrix, cell_record(matrix, cell))["UV_PYTHON_DOWNLOADS_JSON_URL"] == "", (
        "no mirror: uv's built-in list"
    )
    assert args["UV_SHA256"] == matrix.python_install.uv_sha256


def test_defaults_are_the_release_urls(matrix: Matrix) -> None:
    assert apply_mirror(matrix, None) is matrix
    unchanged = apply_mirror(matrix, Mirror())
    assert unchanged.apt == matrix.apt
    assert unchanged.indexes == matrix.indexes
    assert unchanged.apt.url == "https://apt.repos.neuron.amazonaws.com"


def test_partial_mirror_keeps_other_urls(matrix: Matrix, tmp_path: Path) -> None:
    mirror = load_mirror(
        write(tmp_path, f'[apt]\nkey_fingerprint = "{FINGERPRINT.lower()}"\n[indexes]\npypi = "https://m/pypi/"\n')
    )
    mirrored = apply_mirror(matrix, mirror)
    assert mirrored.apt.url == matrix.apt.url
    assert mirrored.apt.key_fingerprint == FINGERPRINT
    assert mirrored.index_for("filelock").url == "https://m/pypi/"
    assert mirrored.index_for("torch-neuronx").url == matrix.index_for("torch-neuronx").url


def test_unknown_index_name_is_refused(matrix: Matrix, tmp_path: Path) -> None:
    with pytest.raises(NeuronTorchError, match="the release's indexes are neuron, pypi, pytorch-cpu"):
        apply_mirror(matrix, load_mirror(write(tmp_path, '[indexes]\ncuda = "https://m/cuda/"\n')))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[apt]\nkey_fingerprint = "ABCD"\n', "40 hex digits"),
        ('ca_bundle = "missing.pem"\n', "no such CA bundle"),
        ('[mirrors]\nx = "y"\n', "unknown key"),
        ('[python]\njson_url = "y"\n', "takes downloads_json_url and install_mirror"),
        ("[apt\n", "not valid TOML"),
    ],
)
def test_bad_settings_are_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(NeuronTorchError, match=message):
        load_mirror(write(tmp_path, text))


def test_ca_bundle_is_relative_to_the_settings_file(tmp_path: Path) -> None:
    (tmp_path / "corp-ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    mirror = load_mirror(write(tmp_path, 'ca_bundle = "corp-ca.pem"\n'))
    assert mirror.ca_bundle == tmp_path / "corp-ca.pem"


def test_env_var_names_the_settings(tmp_path: Path) -> None:
    path = write(tmp_path, '[apt]\nurl = "http://mirror/neuron-apt/"\n')
    mirror = mirror_from_env({ENV_VAR: str(path)})
    assert mirror is not None and mirror.apt_url == "http://mirror/neuron-apt"
    assert mirror_from_env({}) is None


def test_proxy_credentials_are_redacted() -> None:
    assert redact("http://alice:s3cret@proxy.corp:3128") == "http://alice:***@proxy.corp:3128"
    assert redact("https://proxy.corp") == "https://proxy.corp"
    proxy = Proxy(http="http://alice:s3cret@proxy.corp:3128", no_proxy="127.0.0.1,.corp")
    assert proxy.env()["HTTP_PROXY"] == proxy.env()["http_proxy"] == "http://alice:s3cret@proxy.corp:3128"
    assert "https_proxy" not in proxy.env()
    described = Mirror(proxy=proxy, indexes={"pypi": "https://bob:pw@m/pypi/"}).describe()
    assert "s3cret" not in described and ":pw@" not in described
    assert "alice:***@proxy.corp:3128" in described
