"""Unit tests of neuron_torch.matrix_schema: the Reader's typed value checks and `parse` over the parsed TOML of the
release (edited as a dict), each refusal naming the dotted key and the problem."""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from neuron_torch.errors import MatrixError
from neuron_torch.matrix_schema import SCHEMA, Reader, parse
from neuron_torch.model import PythonRoute
from tests import REPO_ROOT

MATRIX = REPO_ROOT / "constraints" / "matrix.toml"
TEST_MATRIX = REPO_ROOT / "constraints" / "test-matrix.toml"
PATH = Path("/somewhere/constraints/matrix.toml")


def _data(path: Path = MATRIX) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _refusal(data: dict[str, Any]) -> MatrixError:
    with pytest.raises(MatrixError) as raised:
        parse(data, PATH, PATH.parents[1])
    assert str(raised.value).startswith(f"{PATH}: ")
    return raised.value


def test_reader_values_are_typed_and_errors_name_the_dotted_key() -> None:
    r = Reader(PATH)
    data = {"v": "2.14.3.0.*", "local": "2.14.0+cpu", "n": 3, "b": True, "s": ["a"], "t": {"x": "y"}}
    assert r.version(data, "v") == "2.14.3.0.*" and r.version(data, "local") == "2.14.0+cpu"
    assert r.whole(data, "n") == 3 and r.flag(data, "b") is True and r.str_list(data, "s") == ("a",)
    assert r.table(data, "t") == {"x": "y"} and r.str_map(data, "t") == {"x": "y"}
    assert r.text({}, "missing", default="fallback") == "fallback" and r.optional({}, "missing") == ""
    assert r.python("3.12", "k") == "3.12" and r.route({"r": "distro"}, "r") == PythonRoute.DISTRO
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: r.table({}, "t", "top."), "top.t: missing table"),
        (lambda: r.table({"t": 1}, "t"), "t: must be a table, not int"),
        (lambda: r.text({"k": 1}, "k", "a."), "a.k: must be a string, not int 1"),
        (lambda: r.version({"k": ">=1.0"}, "k"), "'>=1.0' is not an exact version"),
        (lambda: r.sha256({"k": "ABC"}, "k"), "'ABC' is not a sha256"),
        (lambda: r.sha256({"k": "A" * 64}, "k"), "is not a sha256"),  # upper case is refused
        (lambda: r.python(3.12, "p"), "p: 3.12 is not a Python version"),
        (lambda: r.python("3", "p"), "'3' is not a Python version"),
        (lambda: r.flag({"k": "yes"}, "k"), "k: must be true or false, not 'yes'"),
        (lambda: r.whole({"k": True}, "k"), "whole number >= 0, not True"),
        (lambda: r.whole({"k": -1}, "k"), "whole number >= 0, not -1"),
        (lambda: r.str_list({"k": []}, "k"), "non-empty list of strings, not []"),
        (lambda: r.str_list({"k": ["a", 1]}, "k"), "non-empty list of strings"),
        (lambda: r.str_map({"m": {"a": 1}}, "m", "x."), "x.m.a: must be a string, not 1"),
        (lambda: r.route({"r": "conda"}, "r"), "must be 'distro' or 'uv-standalone', not 'conda'"),
        (lambda: list(r.entries({"e": {"a": 1}}, "e")), "e.a: must be a table"),
    ]
    for call, message in cases:
        with pytest.raises(MatrixError) as raised:
            call()
        assert str(raised.value).startswith(f"{PATH}: ") and message in str(raised.value), message


def test_parse_builds_every_cell_from_the_families_and_systems() -> None:
    data = _data(TEST_MATRIX)  # its systems restrict their Pythons, so the product is filtered
    root = Path("/project")
    matrix = parse(data, TEST_MATRIX, root)
    expected = [
        (family, python, os_id)
        for family, fam in data["families"].items()
        for python in fam["python"]
        for os_id, system in data["os"].items()
        if "python" not in system or python in system["python"]
    ]
    assert [(c.family.name, c.python, c.os.id) for c in matrix.cells] == expected
    assert (
        matrix.generated_dir == root / data["paths"]["generated"] and matrix.locks_dir == root / data["paths"]["locks"]
    )
    assert all(c.generated_dir == matrix.generated_dir for c in matrix.cells)
    assert matrix.release.default_cell in {c.id for c in matrix.cells}


def test_parse_defaults_the_paths_and_normalises_the_apt_fingerprint() -> None:
    data = _data()
    data.pop("paths", None)
    fingerprint = "0123 4567 89ab cdef 0123 4567 89AB CDEF 0123 4567"
    data["apt"]["key_fingerprint"] = fingerprint
    matrix = parse(data, PATH, Path("/project"))
    assert matrix.generated_dir == Path("/project/constraints/generated")
    assert matrix.locks_dir == Path("/project/constraints/locks")
    assert matrix.apt.key_fingerprint == fingerprint.replace(" ", "").upper()
    assert matrix.manifest is not None and matrix.manifest.path == Path("/project") / data["manifest"]["path"]
    del data["manifest"]
    assert parse(data, PATH, Path("/project")).manifest is None
    assert [p.name for p in matrix.apt.packages] == list(data["apt"]["packages"])


def _edit(key: str) -> dict[str, Any]:
    """The release's data with one edit (named by the test case) applied."""
    data = copy.deepcopy(_data())
    first_os = next(iter(data["os"]))
    first_family = next(iter(data["instance_families"]))
    first_instance = next(iter(data["instances"]))
    if key == "os also unsupported":
        data["unsupported"]["os"][first_os] = "no"
    elif key == "unknown instance family":
        data["instances"][first_instance]["family"] = "trn9"
    elif key == "unsupported arch":
        data["instance_families"][first_family]["arch"] = next(iter(data["unsupported"]["arch"]))
    elif key == "short fingerprint":
        data["apt"]["key_fingerprint"] = "ABCD"
    elif key == "bad manifest digest":
        data["manifest"]["sha256"] = "xyz"
    elif key == "no indexes":
        data["indexes"] = []
    elif key == "two defaults":
        data["indexes"][0]["serves"] = ["*"]
    elif key == "no default":
        data["indexes"] = [i for i in data["indexes"] if "*" not in i["serves"]]
    elif key == "duplicate index name":
        data["indexes"][1]["name"] = data["indexes"][0]["name"]
    elif key == "package not a version":
        data["packages"]["nki"] = "latest"
    return data


@pytest.mark.parametrize(
    ("edit", "key", "problem"),
    [
        ("os also unsupported", "os.", "is listed under [unsupported.os] too"),
        ("unknown instance family", ".family", "'trn9' is not one of"),
        ("unsupported arch", ".arch", "is listed under [unsupported.arch]"),
        ("short fingerprint", "apt.key_fingerprint", "40-hex-digit OpenPGP fingerprint"),
        ("bad manifest digest", "manifest.sha256", "64 lower-case hex digits"),
        ("no indexes", "indexes", "non-empty array of [[indexes]]"),
        ("two defaults", "indexes[", "'*' is already served by index"),
        ("no default", "indexes", 'exactly one index must serve "*"'),
        ("duplicate index name", "indexes", "index names must be unique"),
        ("package not a version", "packages.nki", "'latest' is not an exact version"),
    ],
)
def test_parse_refuses_an_inconsistent_release(edit: str, key: str, problem: str) -> None:
    message = str(_refusal(_edit(edit)))
    assert key in message and problem in message


def test_parse_reads_only_its_own_schema() -> None:
    data = _data()
    del data["schema"]
    error = _refusal(data)
    assert error.key == "schema" and f"must be {SCHEMA}" in str(error) and "not None" in str(error)
