"""neuron_torch.commands, each handler through `neuron_torch.cli.main` on a copy of the release: `build image` (its
dry run prints the planned command and writes nothing; a run stages the cell and reports docker's exit, with the
docker step stood in for), `cell`'s lock line and its hint, `instance`, `check` of the release, of one lock (sealed,
unsealed, unsound) and of a cell record, `lock`'s refusals and its output (the resolver stood in for), `manifest
--strict` and `build ami --var`. No docker, packer or resolver runs."""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from neuron_torch import build as building
from neuron_torch import lock as locking
from neuron_torch.build import ImageBuild
from neuron_torch.cellinfo import cell_record
from neuron_torch.cli import main
from neuron_torch.commands import _parse_index
from neuron_torch.errors import NeuronTorchError
from neuron_torch.lockfile import LockedPackage, render_lock
from neuron_torch.matrix import Cell, Index, Matrix, load_matrix

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


@dataclass
class Release:
    """A copy of the release, its matrix, and `run`: main() with --matrix pointing at it."""

    matrix: Matrix
    capsys: pytest.CaptureFixture[str]

    @property
    def option(self) -> list[str]:
        return ["--matrix", str(self.matrix.path)]

    def run(self, *argv: str) -> tuple[int, str, str]:
        code = main([*self.option, *argv])
        out, err = self.capsys.readouterr()
        return code, out, err


@pytest.fixture
def release(
    release_copy: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Release]:
    for name in ("NEURON_TORCH_MIRROR", "NEURON_TORCH_MATRIX", "NEURON_TORCH_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DOCKER", "/opt/docker/bin/docker")
    yield Release(load_matrix(release_copy / "constraints" / "matrix.toml"), capsys)


def sha(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def lock_text(matrix: Matrix, cell: Cell, sealed: bool = True) -> str:
    """The cell's pins, each from its routed index; sealed as `neuron-torch lock` writes, or as pip-compile does."""
    packages = tuple(
        LockedPackage(name, version.replace("*", "1"), "==", (sha(name),), matrix.index_for(name).url)
        for name, version in cell.pins.items()
    )
    text = render_lock(matrix, cell, matrix.indexes, packages, resolver="uv")
    return text if sealed else "".join(line + "\n" for line in text.splitlines() if not line.startswith("#"))


def write_lock(cell: Cell, text: str, path: Path | None = None) -> Path:
    target = path or cell.lock_path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target


# --- build image ----------------------------------------------------------------------------------------------------


def test_build_image_dry_run_prints_the_command_and_writes_nothing(release: Release) -> None:
    cell = release.matrix.cell(release.matrix.release.default_cell)
    write_lock(cell, lock_text(release.matrix, cell))
    code, out, _ = release.run("build", "image", "--cell", cell.id, "--dry-run", "--tag", "nt:test")
    assert code == 0
    assert out.startswith("DOCKER_BUILDKIT=1 /opt/docker/bin/docker build ")
    words = shlex.split(out.removeprefix("DOCKER_BUILDKIT=1 "))
    assert words[words.index("--tag") + 1] == "nt:test" and words[-1] == str(release.matrix.root)
    args = dict(words[i + 1].split("=", 1) for i, word in enumerate(words) if word == "--build-arg")
    assert args["CELL_ID"] == cell.id and args["CELL_DIR"].startswith(f"build/image/{cell.id}-")
    assert not (release.matrix.root / "build").exists()


@pytest.mark.parametrize("status", [0, 3])
def test_build_image_stages_then_reports_dockers_exit(
    release: Release, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, status: int
) -> None:
    cell = release.matrix.cell(release.matrix.release.default_cell)
    write_lock(cell, lock_text(release.matrix, cell))
    ran: list[ImageBuild] = []

    def run_image_build(build: ImageBuild) -> int:
        assert (build.stage_dir / "lock.txt").is_file() and (build.stage_dir / "cell.json").is_file()  # staged first
        ran.append(build)
        return status

    monkeypatch.setattr(building, "run_image_build", run_image_build)
    code, out, err = release.run("build", "image", "--cell", cell.id)  # $DOCKER names no program: refused first
    assert (code, out, ran) == (2, "", []) and not (release.matrix.root / "build").exists()
    assert "$DOCKER='/opt/docker/bin/docker': no such executable" in err
    docker = tmp_path / "bin" / "docker"  # a real executable (a build needs one), never run: run_image_build stands in
    docker.parent.mkdir()
    docker.write_text("#!/bin/sh\nexit 99\n")
    docker.chmod(0o755)
    monkeypatch.setenv("DOCKER", str(docker))
    code, out, err = release.run("build", "image", "--cell", cell.id)
    assert len(ran) == 1 and out.startswith(f"DOCKER_BUILDKIT=1 {shlex.quote(str(docker))} build ")
    if status == 0:
        assert code == 0 and out.rstrip().endswith(f"built {', '.join(ran[0].tags)}")
    else:
        assert code == 1
        assert f"neuron-torch: error: the image build of {cell.id} failed (docker exit 3)" in err


def test_build_image_takes_the_mirrors_proxy_and_ca(release: Release, tmp_path: Path) -> None:
    cell = release.matrix.cell(release.matrix.release.default_cell)
    write_lock(cell, lock_text(release.matrix, cell))
    (tmp_path / "ca.pem").write_text(PEM)
    mirror = tmp_path / "mirror.toml"
    mirror.write_text('ca_bundle = "ca.pem"\n[proxy]\nhttps = "http://alice:s3cret@proxy.example:3128"\n')
    code, out, err = release.run("build", "image", "--cell", cell.id, "--dry-run", "--mirror", str(mirror))
    assert code == 0, err
    words = shlex.split(out.removeprefix("DOCKER_BUILDKIT=1 "))
    assert "https_proxy=http://alice:s3cret@proxy.example:3128" in words  # a build argument, not in the image
    assert words[words.index("--secret") + 1] == f"id=ca,src={(tmp_path / 'ca.pem').resolve()}"
    assert "s3cret" not in err and "alice:***@proxy.example" in err


def test_build_image_without_a_lock_names_the_fix_with_the_same_release(release: Release) -> None:
    cell = release.matrix.cells[0]
    code, out, err = release.run("build", "image", "--cell", cell.id, "--dry-run")
    assert code == 2 and out == ""
    assert f"`neuron-torch --matrix {release.matrix.path} lock --cell {cell.id}`" in err


# --- cell, instance -------------------------------------------------------------------------------------------------


def test_cell_says_whether_its_lock_is_there(release: Release) -> None:
    cell = release.matrix.cells[0]
    lock = str(cell.lock_path.relative_to(release.matrix.root))
    code, out, _ = release.run("cell", cell.id)
    assert code == 0
    assert f"lock: {lock} (missing: run `neuron-torch --matrix {release.matrix.path} lock --cell {cell.id}`)" in out
    write_lock(cell, lock_text(release.matrix, cell))
    assert f"lock: {lock} (present)" in release.run("cell", cell.id)[1]
    code, out, _ = release.run("cell", cell.id, "--json")
    assert json.loads(out) == cell_record(release.matrix, cell)


def test_instance_json_and_text(release: Release) -> None:
    instance = next(iter(release.matrix.instances.values()))
    lnc = release.matrix.instance_families[instance.family].lnc_default
    code, out, _ = release.run("instance", instance.type, "--json")
    assert code == 0
    assert json.loads(out) == {
        "type": instance.type, "family": instance.family, "chips": instance.chips or None,
        "expected_devices": instance.expected_devices, "lnc": lnc, "note": instance.note,
    }  # fmt: skip
    code, _, err = release.run("instance", f"{instance.family}.nt-unlisted", "--json")
    assert code == 2 and "'nt-unlisted' is not an EC2 instance size" in err  # a family's size must be an EC2 size
    unlisted = f"{instance.family}.metal-96xl"
    assert unlisted not in release.matrix.instances
    record = json.loads(release.run("instance", unlisted, "--json")[1])
    assert (record["chips"], record["expected_devices"]) == (None, None)
    out = release.run("instance", unlisted)[1]
    assert out.splitlines()[0] == (
        f"{unlisted}: family {instance.family}, expected logical devices at LNC={lnc}: unknown (not documented)"
    )
    assert out.splitlines()[1] == f"  {record['note']}"


# --- check ----------------------------------------------------------------------------------------------------------


def test_check_of_the_release(release: Release) -> None:
    cell = release.matrix.cells[0]
    write_lock(cell, lock_text(release.matrix, cell))
    code, out, _ = release.run("check")
    assert (code, out) == (
        0,
        f"matrix.toml: {len(release.matrix.cells)} cells, generated files up to date, 1 lock(s) sound\n",
    )
    write_lock(cell, lock_text(release.matrix, cell).replace(cell.pins["nki"], "0.0.1"))
    code, out, err = release.run("check")
    assert code == 1 and out == ""
    problems = [line for line in err.splitlines() if line.startswith("problem: ")]
    assert problems and err.rstrip().endswith(f"{len(problems)} problem(s) found")
    assert any("nki 0.0.1 does not satisfy the pin" in line for line in problems)


def test_check_of_one_lock(release: Release, tmp_path: Path) -> None:
    cell = release.matrix.cells[0]
    good = write_lock(cell, lock_text(release.matrix, cell), tmp_path / "good.txt")
    assert release.run("check", "--lock", str(good), "--cell", cell.id) == (
        0, f"{good}: a sound, sealed lock of {cell.id}\n", "",
    )  # fmt: skip
    assert release.run("check", "--lock", str(good), "--cell", cell.id, "--sealed")[0] == 0
    code, _, err = release.run("check", "--lock", str(good))
    assert code == 2 and "check --lock FILE needs --cell ID" in err
    bad = write_lock(cell, lock_text(release.matrix, cell).replace(cell.pins["torch"], "2.0.0"), tmp_path / "bad.txt")
    code, _, err = release.run("check", "--lock", str(bad), "--cell", cell.id)
    assert code == 1 and f"problem: {bad}: torch 2.0.0 is not the CPU build" in err


def test_check_of_an_unsealed_lock_reads_its_routing_and_names_the_seal_command(
    release: Release, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cell = release.matrix.cells[0]
    plain = write_lock(cell, lock_text(release.matrix, cell, sealed=False), tmp_path / "plain.txt")
    asked: list[str] = []

    class Reader:  # routing.IndexReader's answers: every hash is a file of its routed index
        def __init__(self, ca_bundle: Path | None = None) -> None:
            pass

        def hashes(self, index: Index, name: str) -> set[str]:
            asked.append(index.url)
            return {sha(name)} if release.matrix.index_for(name).name == index.name else set()

    monkeypatch.setattr(locking, "IndexReader", Reader)
    name = release.matrix.indexes[0].name
    code, out, _ = release.run("check", "--lock", str(plain), "--cell", cell.id, "--index", f"{name}=https://m/s/")
    assert code == 0
    assert "https://m/s/" in asked  # the user's index, not the release's
    assert out.startswith(f"{plain}: a sound lock of {cell.id} (every hash is a file of its routed index), not sealed")
    seal = (
        f"neuron-torch --matrix {release.matrix.path} lock --seal {plain} --cell {cell.id} --index {name}=https://m/s/"
    )
    assert f"`{seal}`" in out
    code, _, err = release.run("check", "--lock", str(plain), "--cell", cell.id, "--sealed")
    assert code == 1 and f"refusing the lock {plain} for {cell.id}" in err  # unsound for the gate: a failed check


def test_check_of_a_cell_record(release: Release, tmp_path: Path) -> None:
    cell = release.matrix.cells[0]
    code, out, _ = release.run("check", "--cell-record", str(cell.record_path))
    assert (code, out) == (
        0, f"{cell.record_path}: a cell record of schema 1 (cell {cell.id}, {release.matrix.release.name})\n",
    )  # fmt: skip
    future = tmp_path / "cell.json"
    future.write_text(json.dumps({**cell_record(release.matrix, cell), "schema": 2}))
    code, _, err = release.run("check", "--cell-record", str(future))
    assert code == 2 and "the cell record has schema 2" in err


# --- lock -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--all", "--out", "x.txt"], "--out names one file: use it with --cell, not --all"),
        (["--all", "--seal", "x.txt"], "--seal FILE seals one lock made elsewhere: use it with --cell ID"),
        (["--cell", "{cell}", "--seal", "x.txt", "--find-links", "w"], "--seal FILE seals one lock"),
        (["--cell", "{cell}", "--seal", "x.txt", "--resolver", "pip-tools"], "the lock keeps the resolver that made"),
    ],
)
def test_lock_refuses_options_that_do_not_go_together(release: Release, argv: list[str], problem: str) -> None:
    cell = release.matrix.cells[0]
    code, _, err = release.run("lock", *(a.format(cell=cell.id) for a in argv))
    assert code == 2 and problem in err


def test_lock_all_warns_of_the_wheel_gap_and_names_each_lock(release: Release, monkeypatch: pytest.MonkeyPatch) -> None:
    locked: list[str] = []

    def lock_cell(matrix: Matrix, cell: Cell, **options: object) -> Path:
        assert options["resolver"] == "uv" and options["out"] is None and options["index_urls"] == {}
        locked.append(cell.id)
        return cell.lock_path

    monkeypatch.setattr(locking, "lock_cell", lock_cell)
    code, out, err = release.run("lock", "--all")
    assert code == 0 and locked == [cell.id for cell in release.matrix.cells]
    for cell in release.matrix.cells:
        assert f"locked {cell.id} -> {cell.lock_path.relative_to(release.matrix.root)}" in out.splitlines()
        assert (f"warning: {cell.id}: {cell.os.wheels_note}" in err) == (not cell.os.wheels_available)


def test_lock_seal_reports_the_sealed_lock(release: Release, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cell = release.matrix.cells[0]
    plain = write_lock(cell, lock_text(release.matrix, cell, sealed=False), tmp_path / "plain.txt")

    class Reader:
        def __init__(self, ca_bundle: Path | None = None) -> None:
            pass

        def hashes(self, index: Index, name: str) -> set[str]:
            return {sha(name)}

    monkeypatch.setattr(locking, "IndexReader", Reader)
    code, out, _ = release.run("lock", "--cell", cell.id, "--seal", str(plain))
    assert code == 0
    shown = plain.relative_to(release.matrix.root)  # in the project: shown relative to it
    assert out == f"sealed {cell.id} -> {shown} (every hash is a file of its routed index)\n"
    assert release.run("check", "--lock", str(plain), "--cell", cell.id, "--sealed")[0] == 0


def test_index_options_take_name_equals_url() -> None:
    assert _parse_index("neuron=https://mirror/neuron/simple") == ("neuron", "https://mirror/neuron/simple")
    assert _parse_index("a=https://m.example/simple?b=c") == ("a", "https://m.example/simple?b=c")  # the first '='
    for url in ("b=c", "ftp://m.example/simple", "https:///simple"):
        with pytest.raises(NeuronTorchError, match=f"^--index a: '{url}' is not a URL of http:, https:, file: "):
            _parse_index(f"a={url}")
    for bad in ("neuron", "=https://x", "neuron="):
        with pytest.raises(NeuronTorchError, match=f"--index takes NAME=URL .*not '{bad}'"):
            _parse_index(bad)


# --- manifest, build ami --------------------------------------------------------------------------------------------


def test_manifest_strict_fails_on_a_difference(release: Release) -> None:
    code, out, _ = release.run("manifest", "--json")
    findings = json.loads(out)
    assert code == 0 and findings
    differing = any(f["status"] != "same" for f in findings)
    assert release.run("manifest", "--strict")[0] == (1 if differing else 0)


def test_build_ami_refuses_a_bad_variable_before_packer(release: Release) -> None:
    packer = release.matrix.root / "packer-must-not-run"
    for bad in ("region", "1region=x", "re-gion=x"):
        code, _, err = release.run(
            "build", "ami", "--cell", release.matrix.cells[0].id, "--packer", str(packer), "--var", bad
        )
        assert code == 2 and f"--var takes NAME=VALUE (e.g. region=eu-west-1), not '{bad}'" in err
