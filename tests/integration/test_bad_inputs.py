"""Bad input, command by command: every file argument that is a folder, missing, not UTF-8, empty or of the wrong
shape ends in one clear message naming the problem and exit 2, never a traceback, and nothing is left behind (no
partial lock, bundle or staged build folder, in the temporary folder or in the checkout)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_torch.cli import main
from neuron_torch.matrix import Matrix, load_matrix
from tests import REPO_ROOT
from tests.testbed.fixture_indexes import build_release_indexes

REPO = REPO_ROOT
# Cells derived from the matrix (a release bump edits no test): the latest family's and the first family's.
RELEASE = load_matrix(REPO / "constraints" / "matrix.toml")
FIRST, *_, LAST = RELEASE.families.values()
WHEELS = next(system.id for system in RELEASE.os.values() if system.wheels_available)
CELL = f"{LAST.name}-py{LAST.pythons[1]}-{WHEELS}"
OTHER_CELL = f"{FIRST.name}-py{FIRST.pythons[0]}-{WHEELS}"


def manifest(releases: object) -> str:
    return json.dumps({"manifest_version": "2.32.0", "neuron_releases": releases})


GOOD_PACKAGE = {"name": "neuronx-cc", "version": "2.1", "supported_instances": ["trn2"]}
# name -> content of the input files the cases refer to as {name}
FILES: dict[str, str | bytes] = {
    "binary": b"\xff\xfe\x00\x81 not text",
    "empty": "   \n",
    "toml_syntax": "[release\n",
    "matrix_schema": "schema = 7\n",
    "mirror_unknown": '[mirrors]\nx = "y"\n',
    "mirror_indexes_string": 'indexes = "http://mirror/simple"\n',
    "mirror_unknown_index": '[indexes]\nwarez = "http://mirror/simple"\n',
    "mirror_fingerprint": '[apt]\nkey_fingerprint = "ABCD"\n',
    "mirror_ca_not_pem": 'ca_bundle = "not_pem"\n',
    "mirror_ca_folder": 'ca_bundle = "folder"\n',
    "not_pem": "hello, I am no certificate\n",
    "not_json": "{not json",
    "manifest_list": "[]",
    "manifest_packages_string": manifest([{"neuron_version": "2.32.0", "packages": "neuronx-cc"}]),
    "manifest_no_name": manifest([{"neuron_version": "2.32.0", "packages": [{"version": "1"}]}]),
    "manifest_name_int": manifest([{"neuron_version": "2.32.0", "packages": [{"name": 3, "version": "1"}]}]),
    "manifest_release_string": manifest(["2.32.0"]),
    "manifest_instances_string": manifest(
        [{"neuron_version": "2.32.0", "packages": [{**GOOD_PACKAGE, "supported_instances": "trn2"}]}]
    ),
    "manifest_python_ints": manifest(
        [{"neuron_version": "2.32.0", "packages": [{**GOOD_PACKAGE, "supported_python_versions": [3.12]}]}]
    ),
    "manifest_version_missing": manifest([{"packages": []}]),
    "manifest_other_release": manifest([{"neuron_version": "2.31.0", "packages": []}]),
    "lock_garbage": "!!! this is not a requirement\n",
    "file": "a plain file\n",
}

# (id, argv with {placeholders}, expected part of the message); every case must exit 2.
CASES: list[tuple[str, list[str], str]] = [
    ("matrix folder", ["--matrix", "{folder}", "matrix"], "is a folder, not a matrix file"),
    ("matrix not utf-8", ["--matrix", "{binary}", "matrix"], "the matrix file is not UTF-8 text"),
    ("matrix empty", ["--matrix", "{empty}", "matrix"], "the matrix file is empty"),
    ("matrix missing", ["--matrix", "{missing}", "cell", CELL], "no such matrix file"),
    ("matrix syntax", ["--matrix", "{toml_syntax}", "matrix"], "(syntax)"),
    ("matrix schema", ["--matrix", "{matrix_schema}", "check"], "schema: must be 1"),
    ("mirror folder", ["cell", CELL, "--mirror", "{folder}"], "is a folder, not a mirror settings file"),
    ("mirror not utf-8", ["cell", CELL, "--mirror", "{binary}"], "the mirror settings file is not UTF-8 text"),
    ("mirror empty", ["lock", "--cell", CELL, "--mirror", "{empty}"], "the mirror settings file is empty"),
    ("mirror missing", ["bundle", "--cell", CELL, "--out", "{out}", "--mirror", "{missing}"], "no such mirror"),
    ("mirror syntax", ["cell", CELL, "--mirror", "{toml_syntax}"], "not valid TOML"),
    ("mirror unknown key", ["cell", CELL, "--mirror", "{mirror_unknown}"], "unknown key(s) mirrors"),
    ("mirror indexes string", ["cell", CELL, "--mirror", "{mirror_indexes_string}"], "[indexes] must be a table"),
    ("mirror unknown index", ["cell", CELL, "--mirror", "{mirror_unknown_index}"], "[indexes] names warez"),
    ("mirror fingerprint", ["cell", CELL, "--mirror", "{mirror_fingerprint}"], "must be 40 hex digits"),
    ("mirror CA not PEM", ["cell", CELL, "--mirror", "{mirror_ca_not_pem}"], "holds no PEM certificate"),
    ("mirror CA folder", ["cell", CELL, "--mirror", "{mirror_ca_folder}"], "is a folder, not a CA bundle"),
    ("manifest folder", ["manifest", "{folder}"], "is a folder, not a manifest file"),
    ("manifest not utf-8", ["manifest", "{binary}"], "the manifest file is not UTF-8 text"),
    ("manifest empty", ["manifest", "{empty}"], "the manifest file is empty"),
    ("manifest missing", ["manifest", "{missing}"], "no such manifest file"),
    ("manifest not JSON", ["manifest", "{not_json}"], "not JSON"),
    ("manifest a list", ["manifest", "{manifest_list}"], "no 'neuron_releases' list"),
    ("manifest packages string", ["manifest", "{manifest_packages_string}"], "neuron_releases[0].packages: must be"),
    ("manifest no name", ["manifest", "{manifest_no_name}"], "neuron_releases[0].packages[0].name: must be a string"),
    ("manifest name int", ["manifest", "{manifest_name_int}"], "packages[0].name: must be a string, not int 3"),
    ("manifest release string", ["manifest", "{manifest_release_string}"], "neuron_releases[0]: must be an object"),
    ("manifest instances", ["manifest", "{manifest_instances_string}"], "supported_instances: must be a list"),
    ("manifest pythons", ["manifest", "{manifest_python_ints}"], "supported_python_versions[0]: must be a string"),
    ("manifest version", ["manifest", "{manifest_version_missing}"], "neuron_releases[0].neuron_version: must be"),
    ("manifest release", ["manifest", "{manifest_other_release}", "--release", "2.32.0"], "is not in the manifest"),
    ("check lock folder", ["check", "--lock", "{folder}", "--cell", CELL], "is a folder, not a lock"),
    ("check lock not utf-8", ["check", "--lock", "{binary}", "--cell", CELL], "the lock is not UTF-8 text"),
    ("check lock empty", ["check", "--lock", "{empty}", "--cell", CELL], "the lock is empty"),
    ("check lock missing", ["check", "--lock", "{missing}", "--cell", CELL], "no such lock"),
    ("check lock garbage", ["check", "--lock", "{lock_garbage}", "--cell", CELL], "cannot read the requirement line"),
    ("check lock no cell", ["check", "--lock", "{good_lock}"], "check --lock FILE needs --cell ID"),
    ("lock out folder", ["lock", "--cell", CELL, "--out", "{folder}"], "is a folder; --out names the lock file"),
    ("lock out under a file", ["lock", "--cell", CELL, "--out", "{file}/lock.txt"], "is a file, so"),
    ("lock CA folder", ["lock", "--cell", CELL, "--ca-bundle", "{folder}"], "is a folder, not a CA bundle"),
    ("lock CA not PEM", ["lock", "--cell", CELL, "--ca-bundle", "{not_pem}"], "holds no PEM certificate"),
    ("lock CA missing", ["lock", "--cell", CELL, "--ca-bundle", "{missing}"], "no such CA bundle"),
    ("lock find-links missing", ["lock", "--cell", CELL, "--find-links", "{missing}"], "find-links folder"),
    ("lock index no =", ["lock", "--cell", CELL, "--index", "neuron"], "--index takes NAME=URL"),
    ("lock index unknown", ["lock", "--cell", CELL, "--index", "warez=http://x"], "unknown index name(s) warez"),
    ("lock all out", ["lock", "--all", "--out", "{out}"], "--out names one file"),
    ("lock seal all", ["lock", "--all", "--seal", "{good_lock}"], "--seal FILE seals one lock"),
    ("lock seal folder", ["lock", "--cell", CELL, "--seal", "{folder}"], "is a folder, not a lock"),
    ("lock seal other cell", ["lock", "--cell", OTHER_CELL, "--seal", "{good_lock}"], "is the lock of"),
    ("unknown cell", ["cell", f"{LAST.name}-py{LAST.pythons[1]}-ubuntu30.04"], "ubuntu30.04"),
    ("bundle out a file", ["bundle", "--cell", CELL, "--lock", "{good_lock}", "--out", "{file}"], "is a file"),
    ("bundle out under a file", ["bundle", "--cell", CELL, "--lock", "{good_lock}", "--out", "{file}/b"], "is a file"),
    ("bundle out not empty", ["bundle", "--cell", CELL, "--lock", "{good_lock}", "--out", "{full}"], "is not empty"),
    ("bundle lock folder", ["bundle", "--cell", CELL, "--lock", "{folder}", "--out", "{out}"], "is a folder, not"),
    ("bundle lock not utf-8", ["bundle", "--cell", CELL, "--lock", "{binary}", "--out", "{out}"], "not UTF-8"),
    ("image lock folder", ["build", "image", "--cell", CELL, "--lock", "{folder}", "--dry-run"], "is a folder"),
    ("image lock empty", ["build", "image", "--cell", CELL, "--lock", "{empty}", "--dry-run"], "the lock is empty"),
    (
        "image CA folder",
        ["build", "image", "--cell", CELL, "--lock", "{good_lock}", "--ca-bundle", "{folder}", "--dry-run"],
        "is a folder, not a CA bundle",
    ),
    (
        "image CA not PEM",
        ["build", "image", "--cell", CELL, "--lock", "{good_lock}", "--ca-bundle", "{not_pem}", "--dry-run"],
        "holds no PEM certificate",
    ),
    (
        "image bad tag",
        ["build", "image", "--cell", CELL, "--lock", "{good_lock}", "--tag", "Bad Tag!", "--dry-run"],
        "is not a docker image reference",
    ),
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory, matrix: Matrix) -> Path:
    root = tmp_path_factory.mktemp("inputs")
    for name, content in FILES.items():
        path = root / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    (root / "folder").mkdir()
    (root / "full").mkdir()
    (root / "full" / "something").write_text("x")
    indexes = build_release_indexes(matrix, tmp_path_factory.mktemp("indexes"))
    index_args = [arg for name, url in indexes.items() for arg in ("--index", f"{name}={url}")]
    assert main(["lock", "--cell", CELL, *index_args, "--out", str(root / "good_lock")]) == 0
    return root


def snapshot(*folders: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for f in folders if f.exists() for p in sorted(f.rglob("*")) if p.is_file()}


def test_there_are_at_least_forty_cases() -> None:
    assert len(CASES) >= 40
    assert len({case[0] for case in CASES}) == len(CASES)


@pytest.mark.parametrize(("argv", "message"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_is_refused_cleanly(
    capsys: pytest.CaptureFixture[str], inputs: Path, tmp_path: Path, argv: list[str], message: str
) -> None:
    names = {name: str(inputs / name) for name in [*FILES, "folder", "full", "good_lock"]}
    names |= {"missing": str(tmp_path / "missing.toml"), "out": str(tmp_path / "out")}
    args = [arg.format(**names) if "{" in arg else arg for arg in argv]
    watched = (inputs, tmp_path, REPO / "build", REPO / "constraints")
    before = snapshot(*watched)
    try:
        code = main(args)
    except SystemExit as exit_:  # argparse's own usage errors
        code = int(exit_.code or 0)
    out = capsys.readouterr()
    output = out.out + out.err
    assert code == 2, output
    assert message in output, output
    assert "Traceback" not in output
    assert snapshot(*watched) == before  # nothing written, nothing left half-written
    assert not (tmp_path / "out").exists()
    assert not [p for p in (*inputs.iterdir(), *tmp_path.iterdir()) if p.name.startswith(".")]


def test_a_bundle_that_fails_at_the_apt_step_leaves_nothing(
    capsys: pytest.CaptureFixture[str], inputs: Path, tmp_path: Path, matrix: Matrix
) -> None:
    """The wheels download (from local fixture indexes), then the apt repository is unreachable: no folder stays,
    so the rerun is not told that the folder is not empty."""
    indexes = build_release_indexes(matrix, tmp_path / "indexes")
    mirror = tmp_path / "mirror.toml"
    entries = "".join(f'{name} = "{url}"\n' for name, url in indexes.items())
    missing = (tmp_path / "no-apt-here").as_uri()
    mirror.write_text(f'[apt]\nurl = "{missing}"\nkey_url = "{missing}/key.asc"\n\n[indexes]\n{entries}')
    out = tmp_path / "bundle"
    argv = ["bundle", "--cell", CELL, "--lock", str(inputs / "good_lock"), "--out", str(out), "--mirror", str(mirror)]
    assert main(argv) == 1
    output = capsys.readouterr().err
    assert "cannot download" in output and "no-apt-here" in output, output
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["indexes", "mirror.toml"]


def test_fix_hints_repeat_the_options_the_user_gave(
    capsys: pytest.CaptureFixture[str], release_copy: Path, tmp_path: Path
) -> None:
    matrix = release_copy / "constraints" / "matrix.toml"
    mirror = tmp_path / "mirror.toml"
    mirror.write_text('[indexes]\npypi = "http://mirror.example/simple/"\n')
    assert main(["--matrix", str(matrix), "cell", CELL, "--mirror", str(mirror)]) == 0
    assert f"`neuron-torch --matrix {matrix} lock --cell {CELL} --mirror {mirror}`" in capsys.readouterr().out
    code = main(["--matrix", str(matrix), "build", "image", "--cell", CELL, "--dry-run"])
    assert code == 2
    assert f"`neuron-torch --matrix {matrix} lock --cell {CELL}`" in capsys.readouterr().err
