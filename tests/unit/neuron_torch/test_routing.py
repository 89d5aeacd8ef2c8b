"""Unit tests of neuron_torch.routing: the PEP 503 project URL of an index, and IndexReader's hashes read from a
local (file://) index, cached per page, with a missing page meaning "lists no file"."""

from __future__ import annotations

import urllib.error
from email.message import Message
from pathlib import Path

import pytest

from neuron_torch.errors import NeuronTorchError
from neuron_torch.matrix import Index
from neuron_torch.routing import IndexReader, project_url

A, B, C = "a" * 64, "b" * 64, "c" * 64


def test_project_url_is_the_canonical_name_under_the_index() -> None:
    assert project_url("https://pip.example/simple", "Torch_NeuronX") == "https://pip.example/simple/torch-neuronx/"
    assert project_url("https://pip.example/simple/", "nki") == "https://pip.example/simple/nki/"
    assert project_url("file:///srv/index", "neuronx.cc") == "file:///srv/index/neuronx-cc/index.html"


def _index(tmp_path: Path) -> Index:
    page = tmp_path / "index" / "torch-neuronx" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(
        f'<a href="../../wheels/torch_neuronx-1-py3-none-any.whl#sha256={A}">one</a>\n'
        f'<a href="../../wheels/torch_neuronx-2.tar.gz#sha256={B}">two</a>\n'
        f'<a href="../../wheels/other.whl#md5={C[:32]}">no sha256</a>\n'
    )
    return Index("local", (tmp_path / "index").as_uri(), ("*",))


def test_hashes_are_the_sha256_fragments_of_the_project_page(tmp_path: Path) -> None:
    index = _index(tmp_path)
    reader = IndexReader()
    assert reader.hashes(index, "Torch_Neuronx") == {A, B}
    (tmp_path / "index" / "torch-neuronx" / "index.html").unlink()
    assert reader.hashes(index, "torch-neuronx") == {A, B}  # read once per page


def test_an_unreadable_index_names_the_page(tmp_path: Path) -> None:
    (tmp_path / "index" / "nki").mkdir(parents=True)
    (tmp_path / "index" / "nki" / "index.html").mkdir()  # a folder where the page should be
    index = Index("local", (tmp_path / "index").as_uri(), ("*",))
    with pytest.raises(NeuronTorchError, match=r"cannot read file://.*/nki/index\.html to check where") as raised:
        IndexReader().hashes(index, "nki")
    assert raised.value.exit_code == 1


def test_an_http_404_means_no_files_and_other_errors_name_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    reader = IndexReader()
    index = Index("remote", "https://pip.example/simple", ("*",))
    status = {"code": 404}

    def refuse(url: str, timeout: float) -> None:
        raise urllib.error.HTTPError(url, status["code"], "refused", Message(), None)

    monkeypatch.setattr(reader.opener, "open", refuse)
    assert reader.hashes(index, "nki") == set()
    status["code"] = 503
    with pytest.raises(NeuronTorchError, match=r"cannot read https://pip\.example/simple/numpy/ .*HTTP Error 503"):
        reader.hashes(index, "numpy")


def test_a_project_the_local_index_does_not_list_has_no_hashes(tmp_path: Path) -> None:
    assert IndexReader().hashes(_index(tmp_path), "numpy") == set()
