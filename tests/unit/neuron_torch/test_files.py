"""neuron_torch.files: reading a file the user names gives its text, or one usage error (exit 2) naming the path,
the problem (missing, a folder, unreadable, not UTF-8, empty, not JSON) and the fix; a CA bundle must hold a PEM
certificate; an output folder must be new or empty and writable; publishing moves a staged folder into place; a
tool that a command runs gets no pip or uv configuration and a temp folder inside the work folder."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from neuron_torch import files
from neuron_torch.errors import EXIT_USAGE, NeuronTorchError

FIX = "pass --thing PATH"
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def refusal(call: Callable[..., object], *args: object) -> str:
    with pytest.raises(NeuronTorchError) as raised:
        call(*args)
    assert raised.value.exit_code == EXIT_USAGE
    return str(raised.value)


def test_read_text_returns_the_utf8_text(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text("name = 'ünï'\n", encoding="utf-8")
    assert files.read_text(path, "matrix file", FIX) == "name = 'ünï'\n"


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda p: None, "no such widget"),
        (lambda p: p.mkdir(), "is a folder, not a widget"),
        (lambda p: p.write_bytes(b"ok \xff\xfe"), "the widget is not UTF-8 text (invalid start byte at byte 3)"),
        (lambda p: p.write_text(" \n\t\n"), "the widget is empty"),
    ],
    ids=["missing", "folder", "not-utf8", "blank"],
)
def test_read_text_names_the_path_the_problem_and_the_fix(
    tmp_path: Path, make: Callable[[Path], object], problem: str
) -> None:
    path = tmp_path / "widget.txt"
    make(path)
    assert refusal(files.read_text, path, "widget", FIX) == f"{path}: {problem}; {FIX}"


@pytest.mark.parametrize(
    ("error", "problem"),
    [
        (PermissionError(errno.EACCES, "Permission denied"), "cannot read the widget (permission denied); fix its"),
        (OSError(errno.EIO, "Input/output error"), f"cannot read the widget (Input/output error); {FIX}"),
    ],
)
def test_read_text_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: OSError, problem: str) -> None:
    path = tmp_path / "widget.txt"
    path.write_text("x")

    def fail(self: Path, *args: object, **kwargs: object) -> object:
        raise error

    monkeypatch.setattr(Path, "open", fail)
    assert refusal(files.read_text, path, "widget", FIX).startswith(f"{path}: {problem}")


def test_read_json(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text('{"a": [1, 2]}')
    bad.write_text('{"a": ')
    assert files.read_json(good, "manifest", FIX) == {"a": [1, 2]}
    message = refusal(files.read_json, bad, "manifest", FIX)
    assert message.startswith(
        f"{bad}: the manifest is not JSON (Expecting value: line 1 column 7"
    ) and message.endswith(FIX)
    assert "no such manifest" in refusal(files.read_json, tmp_path / "none.json", "manifest", FIX)


def test_a_ca_bundle_must_hold_a_pem_certificate(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text(PEM)
    assert files.check_ca_bundle(bundle) == bundle
    bundle.write_text("not a certificate\n")
    assert "the CA bundle holds no PEM certificate; pass a PEM file" in refusal(files.check_ca_bundle, bundle)
    assert "no such CA bundle" in refusal(files.check_ca_bundle, tmp_path / "missing.pem")


def test_a_new_or_empty_folder_is_taken(tmp_path: Path) -> None:
    files.check_new_folder(tmp_path / "new" / "deeper")
    (tmp_path / "empty").mkdir()
    files.check_new_folder(tmp_path / "empty")


def test_a_folder_that_cannot_be_replaced_by_the_finished_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # both failed at the end of a whole bundle, as an internal error: rmdir of a link, of "."
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    assert refusal(files.check_new_folder, tmp_path / "link") == (
        f"--out {tmp_path / 'link'} is a link; name the folder itself ({tmp_path / 'empty'}) or a new one"
    )
    monkeypatch.chdir(tmp_path / "empty")
    for here in (Path("."), tmp_path / "empty", Path("../empty")):
        assert (
            refusal(files.check_new_folder, here) == f"--out {here} is the current folder; name a new folder, "
            "e.g. --out nt-bundle"
        )
    files.check_new_folder(Path("new"))


def test_an_output_folder_that_cannot_be_used_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "kept").write_text("x")
    assert (
        refusal(files.check_new_folder, tmp_path / "a-file")
        == f"--out {tmp_path / 'a-file'} is a file; name a new folder"
    )
    under = tmp_path / "a-file" / "sub"
    assert refusal(files.check_new_folder, under, "--bundle") == (
        f"--bundle {under}: {tmp_path / 'a-file'} is a file, so the folder cannot be made; name a new folder"
    )
    assert refusal(files.check_new_folder, tmp_path / "full").endswith("is not empty; name a new folder")
    files.check_new_folder(tmp_path / "new")  # writable: the probe file is made and removed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "full"]

    def refused(*args: object, **kwargs: object) -> tuple[int, str]:  # a folder that refuses a new file (even root's)
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr("tempfile.mkstemp", refused)
    assert refusal(files.check_new_folder, tmp_path / "new") == (
        f"--out {tmp_path / 'new'}: cannot write in {tmp_path} (Permission denied); name a folder you can write"
    )


def test_publish_replaces_an_empty_folder_and_remove_tree_is_quiet(tmp_path: Path) -> None:
    staged, out = tmp_path / ".out.tmp", tmp_path / "out"
    staged.mkdir()
    (staged / "manifest.json").write_text("{}")
    out.mkdir()
    files.publish_folder(staged, out)
    assert (out / "manifest.json").read_text() == "{}" and not staged.exists()
    fresh = tmp_path / ".fresh.tmp"
    fresh.mkdir()
    files.publish_folder(fresh, tmp_path / "fresh")
    assert (tmp_path / "fresh").is_dir()
    files.remove_tree(out)
    assert not out.exists()
    files.remove_tree(out)  # already gone: no error


def test_replace_text_stages_in_a_file_of_its_own_process(tmp_path: Path) -> None:
    """Another process's staged file of the same path (a second test worker rendering at once) is left to it."""
    out = tmp_path / "vars.hcl"
    other = tmp_path / ".vars.hcl.1.tmp"  # pid 1 is never this test's process
    other.write_text("the other writer's")
    files.replace_text(out, "mine\n")
    assert out.read_text() == "mine\n" and other.read_text() == "the other writer's"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".vars.hcl.1.tmp", "vars.hcl"]


def test_a_tool_gets_no_pip_or_uv_configuration_and_a_temp_folder_inside_the_work_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's PIP_INDEX_URL or UV_INDEX cannot reroute a lock or bundle; the named ones pass; TMPDIR is in WORK."""
    for name, value in {"PIP_INDEX_URL": "http://elsewhere", "UV_INDEX": "x", "PIP_CERT": "/ca", "HOME": "/h"}.items():
        monkeypatch.setenv(name, value)
    env = files.tool_env(tmp_path, keep=("PIP_CERT",))
    assert "PIP_INDEX_URL" not in env and "UV_INDEX" not in env
    assert env["PIP_CERT"] == "/ca" and env["HOME"] == "/h" and env["PIP_CONFIG_FILE"] == os.devnull
    assert env["TMPDIR"] == str(tmp_path / "tmp") and (tmp_path / "tmp").is_dir()
