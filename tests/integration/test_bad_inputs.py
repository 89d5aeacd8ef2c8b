"""Bad input, command by command (issue 29): every file argument that is a folder, missing, not UTF-8, NUL bytes,
too large, a device, empty or of the wrong shape, every output path that cannot be written, every bad URL, flag
combination and environment variable ends in one clear line naming the problem (exit 2 bad input, 1 a failed check),
never a traceback, and nothing is left behind (no partial lock, bundle, staged build folder or crash log, in the
temporary folder, the state folder or the checkout). Ctrl-C is one line and exit 130.

Un-writable folders as root (these tests run as root in CI, and root ignores permission bits): /sys/kernel (sysfs
refuses to create a file, EACCES, even for root), /proc (ENOENT for any new name) and a path under a plain file
(ENOTDIR). A chmod 0555 folder is not used: root writes into it."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from neuron_torch import commands
from neuron_torch.cli import main
from neuron_torch.matrix import Matrix, load_matrix
from neuron_torch.render import rendered
from tests import REPO_ROOT, written
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

# the manifest command given a bad file: (id, the file, expected part of the message)
MANIFEST: list[tuple[str, str, str]] = [
    ("manifest folder", "{folder}", "is a folder, not a manifest file"),
    ("manifest not utf-8", "{binary}", "the manifest file is not UTF-8 text"),
    ("manifest empty", "{empty}", "the manifest file is empty"),
    ("manifest missing", "{missing}", "no such manifest file"),
    ("manifest not JSON", "{not_json}", "not JSON"),
    ("manifest a list", "{manifest_list}", "no 'neuron_releases' list"),
    ("manifest packages string", "{manifest_packages_string}", "neuron_releases[0].packages: must be"),
    ("manifest no name", "{manifest_no_name}", "neuron_releases[0].packages[0].name: must be a string"),
    ("manifest name int", "{manifest_name_int}", "packages[0].name: must be a string, not int 3"),
    ("manifest release string", "{manifest_release_string}", "neuron_releases[0]: must be an object"),
    ("manifest instances", "{manifest_instances_string}", "supported_instances: must be a list"),
    ("manifest pythons", "{manifest_python_ints}", "supported_python_versions[0]: must be a string"),
    ("manifest version", "{manifest_version_missing}", "neuron_releases[0].neuron_version: must be"),
]

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
    *((id_, ["manifest", file], message) for id_, file, message in MANIFEST),
    ("manifest release", ["manifest", "{manifest_other_release}", "--release", "2.32.0"], "is not in the manifest"),
    ("check lock folder", ["check", "--lock", "{folder}", "--cell", CELL], "is a folder, not a lock"),
    ("check lock not utf-8", ["check", "--lock", "{binary}", "--cell", CELL], "the lock is not UTF-8 text"),
    ("check lock empty", ["check", "--lock", "{empty}", "--cell", CELL], "the lock is empty"),
    ("check lock missing", ["check", "--lock", "{missing}", "--cell", CELL], "no such lock"),
    ("check lock garbage", ["check", "--lock", "{lock_garbage}", "--cell", CELL], "cannot read the requirement line"),
    ("check lock no cell", ["check", "--lock", "{good_lock}"], "check --lock FILE needs --cell ID"),
    ("lock out folder", ["lock", "--cell", CELL, "--out", "{folder}"], "--out names the file to write, e.g."),
    ("lock out under a file", ["lock", "--cell", CELL, "--out", "{file}/lock.txt"], "is a file, so"),
    ("lock out a device", ["lock", "--cell", CELL, "--out", "/dev/null"], "--out /dev/null is a character device"),
    ("lock CA folder", ["lock", "--cell", CELL, "--ca-bundle", "{folder}"], "is a folder, not a CA bundle"),
    ("lock CA not PEM", ["lock", "--cell", CELL, "--ca-bundle", "{not_pem}"], "holds no PEM certificate"),
    ("lock CA missing", ["lock", "--cell", CELL, "--ca-bundle", "{missing}"], "no such CA bundle"),
    ("lock find-links missing", ["lock", "--cell", CELL, "--find-links", "{missing}"], "find-links folder"),
    ("lock index no =", ["lock", "--cell", CELL, "--index", "neuron"], "--index takes NAME=URL"),
    ("lock index unknown", ["lock", "--cell", CELL, "--index", "warez=http://x"], "unknown index name(s) warez"),
    ("lock all out", ["lock", "--all", "--out", "{out}"], "--out names one file"),
    ("lock seal all", ["lock", "--all", "--seal", "{good_lock}"], "--seal FILE seals one lock"),
    # --resolver beside --seal was ignored: the sealed lock keeps the resolver that made it
    ("lock seal resolver", ["lock", "--cell", CELL, "--seal", "{good_lock}", "--resolver", "uv"], "or --resolver (the"),
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
    (  # the build ran, then --compare failed reading SBOMs the keyring stage does not have
        "image compare a stage",
        ["build", "image", "--cell", CELL, "--lock", "{good_lock}", "--target", "keyring", "--compare", "nt:old"],
        "--compare checks a whole image's package set (its SBOMs, written in the runtime stage); --target keyring",
    ),
]


class Case(NamedTuple):
    """argv (and environment) with {placeholders}; the exit code, a part of the message, stderr's non-empty lines."""

    id: str
    argv: list[str]
    message: str
    code: int = 2
    lines: int = 1
    env: dict[str, str] = {}  # noqa: RUF012  (a NamedTuple default, never mutated)


NT = ["--matrix", "{matrix}"]  # the release matrix, named: hints repeat it
LONG = "x" * 5000  # user data longer than any message may quote
ARGPARSE = 1  # argparse's usage errors: one line naming --help (boundary.OneLineParser)
MORE: list[Case] = [
    # files: NUL bytes, too large, not a regular file (a 300 MB file of NULs once wrote 1.2 GB to stderr)
    Case("lock NUL bytes", ["check", "--lock", "{nul}", "--cell", CELL], "the lock holds NUL bytes"),
    Case("lock too large", ["check", "--lock", "{big}", "--cell", CELL], "too large for a lock"),
    Case("lock too large sealed", ["check", "--lock", "{big}", "--cell", CELL, "--sealed"], "too large for a lock"),
    Case("lock a device", ["check", "--lock", "/dev/zero", "--cell", CELL], "is not a regular file"),
    Case("matrix NUL bytes", ["--matrix", "{nul}", "matrix"], "the matrix file holds NUL bytes"),
    Case("matrix too large", ["--matrix", "{big}", "matrix"], "too large for a matrix file"),
    Case("matrix a device", ["--matrix", "/dev/zero", "matrix"], "is not a regular file"),
    Case("mirror NUL bytes", ["cell", CELL, "--mirror", "{nul}"], "the mirror settings file holds NUL bytes"),
    Case("mirror too large", ["cell", CELL, "--mirror", "{big}"], "too large for a mirror settings file"),
    Case("manifest NUL bytes", ["manifest", "{nul}"], "the manifest file holds NUL bytes"),
    Case("manifest too large", ["manifest", "{big}"], "too large for a manifest file"),
    Case("manifest a device", ["manifest", "/dev/zero"], "is not a regular file"),
    Case("CA NUL bytes", ["lock", "--cell", CELL, "--ca-bundle", "{nul}"], "the CA bundle holds NUL bytes"),
    Case("CA not utf-8", ["lock", "--cell", CELL, "--ca-bundle", "{binary}"], "the CA bundle is not UTF-8"),
    Case("CA empty", ["lock", "--cell", CELL, "--ca-bundle", "{empty}"], "the CA bundle is empty"),
    Case("check CA not PEM", ["check", "--lock", "{pip_lock}", "--cell", CELL, "--ca-bundle", "{not_pem}"], "no PEM"),
    Case("record folder", ["check", "--cell-record", "{folder}"], "is a folder, not a cell record"),
    Case("record missing", ["check", "--cell-record", "{missing}"], "no such cell record"),
    Case("record not utf-8", ["check", "--cell-record", "{binary}"], "the cell record is not UTF-8"),
    Case("record NUL bytes", ["check", "--cell-record", "{nul}"], "the cell record holds NUL bytes"),
    Case("record too large", ["check", "--cell-record", "{big}"], "too large for a cell record"),
    Case("record empty", ["check", "--cell-record", "{empty}"], "the cell record is empty"),
    Case("record not JSON", ["check", "--cell-record", "{not_json}"], "the cell record is not JSON"),
    Case("record a list", ["check", "--cell-record", "{manifest_list}"], "not a cell record"),
    Case("record old schema", ["check", "--cell-record", "{record_old}"], "the cell record has schema 0"),
    Case("seal not utf-8", ["lock", "--cell", CELL, "--seal", "{binary}"], "the lock is not UTF-8"),
    Case("seal missing", ["lock", "--cell", CELL, "--seal", "{missing}"], "no such lock"),
    Case("seal garbage", ["lock", "--cell", CELL, "--seal", "{lock_garbage}"], "cannot read the requirement line"),
    Case("lock line quoted short", ["check", "--lock", "{long_line}", "--cell", CELL], "cannot read the requirement"),
    Case("bundle lock NUL", ["bundle", "--cell", CELL, "--lock", "{nul}", "--out", "{out}"], "holds NUL bytes"),
    Case("image lock NUL", ["build", "image", "--cell", CELL, "--lock", "{nul}", "--dry-run"], "holds NUL bytes"),
    Case("ami lock folder", ["build", "ami", "--cell", CELL, "--lock", "{folder}"], "is a folder, not a lock"),
    # hints name the real cell, not a placeholder
    Case("hint names the cell", ["check", "--lock", "{missing}", "--cell", CELL], f"lock --cell {CELL}`"),
    # the lock gate: an unsound lock is a failed check (1) with or without --sealed; its problems are listed
    Case("edited lock", ["check", "--lock", "{edited_lock}", "--cell", CELL], "problem(s) found", 1, 2),
    Case("edited lock sealed", ["check", "--lock", "{edited_lock}", "--cell", CELL, "--sealed"], "refusing", 1, 3),
    Case("CUDA lock sealed", ["check", "--lock", "{cuda_lock}", "--cell", CELL, "--sealed"], "CUDA torch", 1, 5),
    Case("seal a CUDA lock", ["lock", "--cell", CELL, "--seal", "{cuda_pip_lock}"], "a CUDA torch", 1, 3),
    Case("bundle edited lock", ["bundle", "--cell", CELL, "--lock", "{edited_lock}", "--out", "{out}"], "edited", 1, 3),
    Case(
        "image edited lock", ["build", "image", "--cell", CELL, "--lock", "{edited_lock}", "--dry-run"], "edited", 1, 3
    ),
    Case("lock of another cell", ["check", "--lock", "{good_lock}", "--cell", OTHER_CELL], "problem(s)", 1, 0),
    # output paths: checked before any work, a folder refused by name, un-writable folders (see the docstring)
    Case("lock out read-only", ["lock", "--cell", CELL, "--out", "/sys/kernel/lock.txt"], "cannot write in /sys"),
    Case("lock out in /proc", ["lock", "--cell", CELL, "--out", "/proc/lock.txt"], "cannot write in /proc"),
    Case("lock out deep under a file", ["lock", "--cell", CELL, "--out", "{file}/a/b/lock.txt"], "is a file, so"),
    Case("seal out folder", ["lock", "--cell", CELL, "--seal", "{good_lock}", "--out", "{folder}"], "is a folder"),
    Case("seal out read-only", ["lock", "--cell", CELL, "--seal", "{good_lock}", "--out", "/sys/kernel/l"], "/sys"),
    Case("bundle out read-only", ["bundle", "--cell", CELL, "--lock", "{good_lock}", "--out", "/sys/kernel/b"], "/sys"),
    Case("bundle out in /proc", ["bundle", "--cell", CELL, "--lock", "{good_lock}", "--out", "/proc/b"], "/proc"),
    Case("render generated is a file", ["--matrix", "{blocked}", "render"], "is a file, so"),
    Case("render target is a folder", ["--matrix", "{folder_target}", "render"], "is a folder; render: names the"),
    # URLs
    Case("index not a URL", ["lock", "--cell", CELL, "--index", "neuron=not-a-url"], "is not a URL of http:"),
    Case("index ftp", ["lock", "--cell", CELL, "--index", "neuron=ftp://mirror/simple"], "is not a URL of http:"),
    Case("index no host", ["lock", "--cell", CELL, "--index", "neuron=http://"], "is not a URL of http:"),
    Case("index bad port", ["lock", "--cell", CELL, "--index", "neuron=http://mirror:port/simple"], "is not a URL"),
    Case("index space", ["lock", "--cell", CELL, "--index", "neuron=http://mirror/a b"], "is not a URL of http:"),
    Case("index no name", ["lock", "--cell", CELL, "--index", "=http://mirror/simple"], "--index takes NAME=URL"),
    Case("index no URL", ["lock", "--cell", CELL, "--index", "neuron="], "--index takes NAME=URL"),
    Case("index long", ["lock", "--cell", CELL, "--index", f"neuron=not-a-url-{LONG}"], "(5010 characters)"),
    Case("check index bad", ["check", "--lock", "{pip_lock}", "--cell", CELL, "--index", "pypi=nope"], "not a URL"),
    Case("mirror proxy not a URL", ["cell", CELL, "--mirror", "{mirror_proxy}"], "[proxy] https: 'not a url'"),
    Case("mirror proxy ftp", ["cell", CELL, "--mirror", "{mirror_proxy_ftp}"], "[proxy] http: 'ftp://proxy"),
    Case("mirror index not a URL", ["cell", CELL, "--mirror", "{mirror_index_url}"], "[indexes] pypi: 'pypi'"),
    Case("mirror apt not a URL", ["cell", CELL, "--mirror", "{mirror_apt_url}"], "[apt] url: 'apt.example'"),
    Case("mirror CA missing", ["cell", CELL, "--mirror", "{mirror_ca_missing}"], "no such CA bundle"),
    Case("mirror value not a string", ["cell", CELL, "--mirror", "{mirror_int}"], "http must be a string"),
    # values and flag combinations
    Case("instance bad size", ["instance", "trn2.bogus"], "'bogus' is not an EC2 instance size"),
    Case("instance no size", ["instance", "trn2."], "'' is not an EC2 instance size"),
    Case("instance unknown family", ["instance", "p5.48xlarge"], "instance type 'p5.48xlarge' is not supported"),
    Case("instance unsupported family", ["instance", "trn1.32xlarge"], "is not supported: Trn1"),
    Case("instance long", ["instance", f"trn2.{LONG}"], "(5000 characters)"),
    # an option that goes with --lock, given without it, is refused, not ignored (`check --sealed` checked no seal)
    Case("check sealed alone", ["check", "--sealed"], "check --sealed goes with --lock FILE --cell ID"),
    Case("check index alone", ["check", "--index", "torch=http://x/simple"], "check --index goes with --lock"),
    Case(
        "check record and lock",
        ["check", "--cell-record", "{folder}", "--lock", "{good_lock}", "--cell", CELL],
        "check --cell-record checks one cell record; --lock",
    ),
    Case("manifest release empty", ["manifest", "--release", ""], "argument --release: is empty", 2, ARGPARSE),
    # an empty value is refused, not taken as the option left out or as '' (a Path: the current folder)
    Case("cluster-report dir empty", ["cluster-report", "", "--expect", "1"], "argument dir: is empty", 2, ARGPARSE),
    Case("project empty", ["--project", "", "matrix"], "argument --project: is empty", 2, ARGPARSE),
    Case("cell record empty name", ["check", "--cell-record", " "], "argument --cell-record: is empty", 2, ARGPARSE),
    Case("image cell empty", ["build", "image", "--cell="], "argument --cell: is empty", 2, ARGPARSE),
    Case("manifest release blank", ["manifest", "--release", "  "], "argument --release: is empty", 2, ARGPARSE),
    Case("manifest release unknown", ["manifest", "--release", "9.9.9"], "release '9.9.9' is not in the manifest"),
    Case("image target bogus", ["build", "image", "--cell", CELL, "--target", "bogus", "--dry-run"], "no stage of"),
    Case("image target empty", ["build", "image", "--cell", CELL, "--target", "", "--dry-run"], "--target: is empty"),
    Case(
        "image tag long",
        ["build", "image", "--cell", CELL, "--lock", "{good_lock}", "--tag", LONG, "--dry-run"],
        "is not a docker image reference",
    ),
    Case("ami var bad", ["build", "ami", "--cell", CELL, "--var", "1x=2"], "--var takes NAME=VALUE"),
    Case("ami var long", ["build", "ami", "--cell", CELL, "--var", LONG], "(5000 characters)"),
    Case("cell long", ["cell", LONG], "is not a cell id"),
    Case("cell unknown family", ["cell", "9.99-py3.12-ubuntu24.04"], "9.99"),
    Case("bundle unknown cell", ["bundle", "--cell", "nope", "--out", "{out}"], "is not a cell id"),
    Case("lock find-links empty", ["lock", "--cell", CELL, "--find-links", "{folder}"], "holds no wheels"),
    Case("lock find-links a file", ["lock", "--cell", CELL, "--find-links", "{file}"], "is not a folder"),
    Case(
        "lock seal find-links",
        ["lock", "--cell", CELL, "--seal", "{good_lock}", "--find-links", "{folder}"],
        "--seal FILE seals one lock",
    ),
    Case("check cell without lock", ["check", "--cell", CELL], "check --lock FILE needs --cell ID"),
    Case("check unknown cell", ["check", "--lock", "{good_lock}", "--cell", "nope"], "is not a cell id"),
    Case("project not a checkout", ["--project", "{folder}", "matrix"], "not a neuron-torch project"),
    Case("project a file", ["--project", "{file}", "matrix"], "not a neuron-torch project"),
    # argparse's own usage errors: its usage line and one error line
    Case("no command", [], "required: COMMAND", 2, ARGPARSE),
    Case("unknown command", ["bogus"], "invalid choice: 'bogus'", 2, ARGPARSE),
    Case("lock neither cell nor all", ["lock"], "one of the arguments --cell --all is required", 2, ARGPARSE),
    Case("lock cell and all", ["lock", "--cell", CELL, "--all"], "not allowed with argument", 2, ARGPARSE),
    Case("lock resolver bogus", ["lock", "--cell", CELL, "--resolver", "poetry"], "invalid choice", 2, ARGPARSE),
    Case("build no artifact", ["build"], "required: ARTIFACT", 2, ARGPARSE),
    Case("ami only bogus", ["build", "ami", "--cell", CELL, "--only", "qemu"], "invalid choice", 2, ARGPARSE),
    Case("bundle no out", ["bundle", "--cell", CELL], "required: --out", 2, ARGPARSE),
    Case("unknown option", ["matrix", "--bogus"], "unrecognized arguments: --bogus", 2, ARGPARSE),
]
LOCK_OUT = ["lock", "--cell", CELL, "--out", "{out}"]
IMAGE = ["build", "image", "--cell", CELL, "--lock", "{good_lock}"]
MIRROR, MATRIX = "NEURON_TORCH_MIRROR", "NEURON_TORCH_MATRIX"
# environment variables, validated as the flags they stand for:
# (id, argv with {placeholders}, expected part of the message, the variable, its value with {placeholders})
ENV: list[tuple[str, list[str], str, str, str]] = [
    ("UV missing", LOCK_OUT, "$NEURON_TORCH_UV='/nonexistent/uv'", "NEURON_TORCH_UV", "/nonexistent/uv"),
    ("UV a folder", LOCK_OUT, "no such executable", "NEURON_TORCH_UV", "{folder}"),
    ("UV not executable", LOCK_OUT, "no such executable", "NEURON_TORCH_UV", "{file}"),
    ("UV not a program", LOCK_OUT, "could not run uv pip compile", "NEURON_TORCH_UV", "{not_a_program}"),
    ("DOCKER missing", IMAGE, "$DOCKER='/nonexistent", "DOCKER", "/nonexistent/docker"),
    (
        "MIRROR missing",
        ["cell", CELL],
        "no such mirror settings file; fix --mirror or $NEURON_TORCH_MIRROR",
        MIRROR,
        "{missing}",
    ),
    ("MIRROR a folder", ["lock", "--cell", CELL], "is a folder, not a mirror settings file", MIRROR, "{folder}"),
    ("MIRROR bad proxy", ["bundle", "--cell", CELL, "--out", "{out}"], "[proxy] https", MIRROR, "{mirror_proxy}"),
    ("MATRIX missing", ["matrix"], "no such matrix file; pass $NEURON_TORCH_MATRIX", MATRIX, "{missing}"),
    ("MATRIX not utf-8", ["matrix"], "not UTF-8", MATRIX, "{binary}"),
    ("MATRIX a folder", ["check"], "is a folder, not a matrix file", MATRIX, "{folder}"),
    ("PROJECT not a checkout", ["matrix"], "$NEURON_TORCH_PROJECT", "NEURON_TORCH_PROJECT", "{folder}"),
]
ALL: list[Case] = [
    *(Case(*case) for case in CASES),
    *MORE,
    *(Case(id_, argv, message, env={name: value}) for id_, argv, message, name, value in ENV),
]


def record(schema: int) -> str:
    return json.dumps({"schema": schema, "id": CELL})


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory, matrix: Matrix) -> Path:
    root = tmp_path_factory.mktemp("inputs")
    extra: dict[str, str | bytes] = {
        "nul": b"torch==2.0\x00\x00\x00\n" * 100,
        "long_line": "!" * 100_000 + "\n",
        "record_old": record(0),
        "mirror_proxy": '[proxy]\nhttps = "not a url"\n',
        "mirror_proxy_ftp": '[proxy]\nhttp = "ftp://proxy.example:21"\n',
        "mirror_index_url": '[indexes]\npypi = "pypi"\n',
        "mirror_apt_url": '[apt]\nurl = "apt.example"\n',
        "mirror_ca_missing": 'ca_bundle = "no-such.pem"\n',
        "mirror_int": "[proxy]\nhttp = 3128\n",
        "not_a_program": "#!/nonexistent/interpreter\n",
    }
    for name, content in {**FILES, **extra}.items():
        written(root / name, content)
    (root / "not_a_program").chmod(0o755)
    with (root / "big").open("wb") as big:  # sparse: 33 MiB of NULs costs no disk
        big.truncate(33 * 2**20)
    (root / "folder").mkdir()
    (root / "full").mkdir()
    (root / "full" / "something").write_text("x")
    _projects(root)
    indexes = build_release_indexes(matrix, tmp_path_factory.mktemp("indexes"))
    index_args = [arg for name, url in indexes.items() for arg in ("--index", f"{name}={url}")]
    assert main(["lock", "--cell", CELL, *index_args, "--out", str(root / "good_lock")]) == 0
    _bad_locks(root)
    return root


def _bad_locks(root: Path) -> None:
    """An edited lock (one hash changed under its seal), a CUDA torch one, and both as pip-compile writes them."""
    text = (root / "good_lock").read_text()
    first_hash = re.search(r"--hash=sha256:([0-9a-f]{64})", text)
    assert first_hash is not None
    (root / "edited_lock").write_text(text.replace(first_hash[1], "0" * 64, 1))
    cuda = re.sub(r"^torch==([0-9.]+)\+cpu", r"torch==\1", text, flags=re.MULTILINE)
    assert cuda != text
    (root / "cuda_lock").write_text(cuda)
    unsealed = [line for line in text.splitlines() if not line.startswith("#")]
    (root / "pip_lock").write_text("\n".join(unsealed) + "\n")
    cuda_unsealed = [line for line in cuda.splitlines() if not line.startswith("#")]
    (root / "cuda_pip_lock").write_text("\n".join(cuda_unsealed) + "\n")


def _projects(root: Path) -> None:
    """Two copies of the release whose render cannot write: `constraints/generated` a file; a target a folder."""
    for name in ("blocked", "folder_target"):
        shutil.copytree(REPO / "constraints", root / name / "constraints", ignore=shutil.ignore_patterns("locks"))
    generated = root / "blocked" / "constraints" / "generated"
    shutil.rmtree(generated)
    generated.write_text("in the way\n")
    target = next(iter(rendered(load_matrix(root / "folder_target" / "constraints" / "matrix.toml"))))
    target.unlink(missing_ok=True)
    target.mkdir(parents=True)


def snapshot(*folders: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for f in folders if f.exists() for p in sorted(f.rglob("*")) if p.is_file()}


def test_there_are_at_least_a_hundred_cases() -> None:
    assert len(ALL) >= 100
    assert len({case.id for case in ALL}) == len(ALL)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A temp and a state folder of this test's own (both must stay empty), no environment the table does not set,
    and a fixed terminal width for argparse's usage line."""
    for name in ("NEURON_TORCH_UV", "NEURON_TORCH_MIRROR", "NEURON_TORCH_MATRIX", "NEURON_TORCH_PROJECT", "DOCKER"):
        monkeypatch.delenv(name, raising=False)
    for name in ("tmp", "state"):
        (tmp_path / name).mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path


@pytest.mark.parametrize("case", ALL, ids=[case.id for case in ALL])
def test_bad_input_is_refused_cleanly(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, inputs: Path, clean_env: Path, case: Case
) -> None:
    tmp_path = clean_env
    names = {p.name: str(p) for p in inputs.iterdir()} | {"matrix": str(REPO / "constraints" / "matrix.toml")}
    names |= {"missing": str(tmp_path / "missing.toml"), "out": str(tmp_path / "out")}
    for name in ("blocked", "folder_target"):
        names[name] = str(inputs / name / "constraints" / "matrix.toml")
    for key, value in case.env.items():
        monkeypatch.setenv(key, value.format(**names))
    args = [arg.format(**names) if "{" in arg else arg for arg in case.argv]
    watched = (inputs, tmp_path, REPO / "build", REPO / "constraints")
    before = snapshot(*watched)
    try:
        code = main(args)
    except SystemExit as exit_:  # argparse's own usage errors
        code = int(exit_.code or 0)
    out = capsys.readouterr()
    output = out.out + out.err
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert code == case.code, output
    assert case.message in output, output
    assert "Traceback" not in output
    if case.lines:  # 0: as many lines as the problems listed
        assert len(lines) == case.lines, out.err
    assert all(len(line) <= 1200 for line in lines), "user data is quoted at most 200 characters"
    assert snapshot(*watched) == before  # nothing written, nothing left half-written
    assert not (tmp_path / "out").exists()
    assert not [p for p in (*inputs.iterdir(), *tmp_path.iterdir()) if p.name.startswith(".")]
    assert not any((tmp_path / "tmp").iterdir()) and not any((tmp_path / "state").iterdir())


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


def test_an_unexpected_error_is_one_line_naming_its_log(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, clean_env: Path
) -> None:
    """A bug below main: one line naming the log file (in the state folder), which holds the traceback; exit 1."""

    def broken(args: object, matrix: object) -> int:
        raise RuntimeError("a bug " + "y" * 5000)

    monkeypatch.setattr(commands, "cmd_matrix", broken)
    assert main(["matrix"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "internal error: RuntimeError: 'a bug yyy" in err and "(5006 characters)" in err, err
    logs = list((clean_env / "state" / "neuron-torch").iterdir())
    assert len(logs) == 1 and str(logs[0]) in err
    assert "Traceback" in logs[0].read_text() and ", in broken" in logs[0].read_text()


def start(argv: list[str], tmp: Path, **env: str) -> subprocess.Popen[str]:
    """`python -m neuron_torch ARGV` with this checkout on the path and a temp and state folder of its own."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TMPDIR": str(tmp / "tmp"), **env}
    environment["XDG_STATE_HOME"] = str(tmp / "state")
    for name in ("tmp", "state"):
        (tmp / name).mkdir(exist_ok=True)
    command = [sys.executable, "-m", "neuron_torch", *argv]
    return subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def interrupt_when(process: subprocess.Popen[str], ready: Callable[[], bool]) -> tuple[str, str]:
    """Ctrl-C (SIGINT) once `ready()` says the command is under way; its stdout and stderr."""
    deadline = time.monotonic() + 60
    while not ready():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the command never got under way"
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    return process.communicate(timeout=60)


def assert_interrupted(process: subprocess.Popen[str], err: str, tmp: Path) -> None:
    assert process.returncode == 130, err
    assert [line for line in err.splitlines() if line.strip()] == [
        "neuron-torch: interrupted (Ctrl-C); nothing was left half-written"
    ]
    assert not any((tmp / "tmp").iterdir()) and not any((tmp / "state").iterdir())


def test_ctrl_c_in_lock_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    """The resolver (a stand-in uv that says it started, then waits) is interrupted: no lock, no work folder."""
    marker, uv = tmp_path / "uv-started", tmp_path / "uv"
    uv.write_text(f"#!/bin/sh\ntouch {marker}\nexec sleep 60\n")
    uv.chmod(0o755)
    out = tmp_path / "lock.txt"
    process = start(["lock", "--cell", CELL, "--out", str(out)], tmp_path, NEURON_TORCH_UV=str(uv))
    _, err = interrupt_when(process, marker.exists)
    assert_interrupted(process, err, tmp_path)
    assert not out.exists()


def test_ctrl_c_in_bundle_is_one_line_and_leaves_nothing(inputs: Path, tmp_path: Path) -> None:
    """pip waits on an index that accepts the connection and never answers; Ctrl-C once pip has connected (so its
    own temp folders exist, and it is killed, not asked): no bundle, no staged folder, nothing in the temp folder."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/simple"
        mirror = tmp_path / "mirror.toml"
        mirror.write_text("[indexes]\n" + "".join(f'{i.name} = "{url}"\n' for i in RELEASE.indexes))
        out = tmp_path / "bundle"
        argv = ["bundle", "--cell", CELL, "--lock", str(inputs / "good_lock"), "--out", str(out)]
        process = start([*argv, "--mirror", str(mirror)], tmp_path)
        _, err = interrupt_when(process, lambda: bool(select.select([silent], [], [], 0)[0]))  # pip has connected
    err = "\n".join(line for line in err.splitlines() if not line.startswith(("mirror settings", "  ")))
    assert_interrupted(process, err, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mirror.toml", "state", "tmp"]
