"""Stage 1: Python and package versions against the cell's pins, and `pip check`."""

from __future__ import annotations

import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from neuron_cell import pins
from neuron_smoke import cells
from neuron_smoke.context import Context, StageLog

REPORTED = ("torch", "torch-neuronx", "neuronx-cc", "nki")
PIP_CHECK = ("-m", "pip", "check")

_started: subprocess.Popen[str] | None = None


def start_pip_check() -> None:
    """Start `pip check` now, in a process of its own, for this stage to collect: `python -m neuron_smoke` calls
    this before it imports torch, so the check (about a second: a new interpreter importing pip) runs beside that
    import instead of after it. The installed packages do not change in between."""
    global _started
    if _started is None:
        _started = subprocess.Popen(
            [sys.executable, *PIP_CHECK],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def installed_version(dist: str) -> str | None:
    """The installed distribution's version (None: not installed), from its core metadata's `Version:` header:
    metadata.version() parses the whole file, long description included (transformers': 30 kB, about 0.5 ms)."""
    try:
        found = metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return None
    head = (found.read_text("METADATA") or found.read_text("PKG-INFO") or "").partition("\n\n")[0]
    for line in head.splitlines():  # the header block: one field a line, Version once (core metadata spec)
        if line.startswith("Version:"):
            return line.removeprefix("Version:").strip()
    return found.version


def run(ctx: Context, log: StageLog) -> None:
    on_neuron = ctx.backend.name == "neuron"
    found = {"python": platform.python_version(), **{d: installed_version(d) for d in REPORTED}}
    log.numbers["versions"] = {k: v or "not installed" for k, v in found.items()}
    for dist in sorted(cells.NEURON_DISTRIBUTIONS):
        if found[dist] is None and on_neuron:
            log.fail(f"{dist} is not installed (required on neuron)")
    _check_imported_torch(log, found["torch"])
    _check_pins(ctx, log, on_neuron)
    _pip_check(ctx, log)
    if not log.summary:
        log.summary = ", ".join(f"{k} {v or '-'}" for k, v in found.items())


def _check_imported_torch(log: StageLog, metadata_version: str | None) -> None:
    """The torch this process imported, not only the installed metadata: a second torch earlier on sys.path (or a
    stale dist-info) would otherwise pass the pins while another build runs. So the imported package must be the
    installed distribution's own folder, and its version the metadata's, matched as a pin (pins.satisfies; the same
    string is the same build even where it is not PEP 440): PyPI's torch wheels carry their build's local label in
    torch.__version__ only (torch-2.13.0-cp312 from PyPI: METADATA `Version: 2.13.0`, `2.13.0+cu130` imported), as a
    label-less pin accepts any label; the PyTorch CPU index's wheels say `2.13.0+cpu` in both, and another label is
    another build."""
    import torch

    imported = Path(torch.__file__).parent
    log.numbers["torch_imported"] = {"version": torch.__version__, "path": str(imported)}
    if metadata_version is None:
        return
    installed = _installed_package("torch", "torch")
    if installed is not None and installed != imported.resolve():
        log.fail(
            f"the imported torch ({torch.__version__}, {imported}) is not the installed distribution's "
            f"({metadata_version}, {installed}): two torch installations; the pins were checked against the "
            "installed one. Remove the other torch from sys.path (PYTHONPATH, the current directory)"
        )
    elif (
        torch.__version__ != metadata_version
        and pins.satisfies("torch", metadata_version, torch.__version__) is not None
    ):
        log.fail(
            f"the imported torch is {torch.__version__} ({imported}) but the installed metadata says "
            f"{metadata_version}: two torch installations; the pins were checked against the metadata"
        )


def _installed_package(dist: str, package: str) -> Path | None:
    """The folder of `package` as the installed distribution `dist` placed it (None: not installed, or not a folder
    there, as in an editable install)."""
    try:
        found = Path(str(metadata.distribution(dist).locate_file(package))).resolve()
    except metadata.PackageNotFoundError:
        return None
    return found if found.is_dir() else None


def _check_pins(ctx: Context, log: StageLog, on_neuron: bool) -> None:
    cell = ctx.options.cell
    if cell is None:
        log.note(
            "pins not checked: no cell given (--cell-file, NEURON_TORCH_CELL_FILE, --cell, or "
            f"{cells.DEFAULT_CELL_FILE}); versions recorded only"
        )
        log.numbers["cell"] = None
        return
    log.numbers["cell"] = {"id": cell.get("id"), "source": ctx.options.cell_source}
    mismatches: list[str] = []
    want_python = str(cell.get("python", ""))
    have_python = ".".join(platform.python_version_tuple()[:2])
    if want_python and have_python != want_python:
        mismatches.append(f"python {have_python} != {want_python}")
    checked = 0
    absent: list[str] = []
    builds: list[str] = []  # what the installed build is, where its version alone does not say
    for dist, pin in cells.expected_pins(cell):
        have = installed_version(dist)
        if have is None:
            # Off Neuron the Neuron-only packages of a full lock may legitimately be absent.
            if on_neuron or dist == "torch":
                mismatches.append(f"{dist} not installed (pinned {pin})")
            elif dist not in absent:
                absent.append(dist)
            continue
        checked += 1
        problem = pins.satisfies(dist, pin, have)
        if problem:
            mismatches.append(problem)
            if dist == "torch" and pin.endswith("+cpu") and "+" not in have:
                builds.append(
                    f"torch {have} has no +cpu label: PyPI's build (on Linux the CUDA one) or a source build, not "
                    "the PyTorch CPU index's, where the lock routes torch"
                )
    log.numbers["pins_checked"] = checked
    log.numbers["pin_mismatches"] = mismatches
    if absent:
        log.numbers["pinned_not_installed"] = absent
        log.note(f"not installed on {ctx.backend.name} (not a failure off Neuron): {', '.join(absent)}")
    for m in mismatches:
        log.fail(f"version drift from cell {cell.get('id')}: {m}")
    if mismatches:
        into = f"a venv of Python {want_python}" if want_python else "this Python"
        fix = (
            f"to fix the drift: install the cell's hash lock into {into}: `neuron-torch lock --cell {cell.get('id')}` "
            f"where the indexes are reachable, then `pip install --require-hashes -r {cell.get('lock') or 'LOCK'}` "
            "with its pip"
        )
        log.note("; ".join([fix, *builds]))
    log.summary = f"cell {cell.get('id')}: {checked} pins checked, {len(mismatches)} mismatched"


def _pip_check(ctx: Context, log: StageLog) -> None:
    global _started
    proc, _started = _started, None
    if proc is None:  # not started early (a caller running the stages itself)
        start_pip_check()
        proc, _started = _started, None
    assert proc is not None
    try:
        stdout, stderr = proc.communicate(timeout=min(120.0, ctx.options.timeout_s))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        log.fail("pip check timed out")
        return
    output = (stdout + stderr).strip()
    if "No module named pip" in output:
        log.note("pip check not run: pip is not installed in this Python")
        log.numbers["pip_check"] = "not run"
        return
    log.numbers["pip_check"] = "ok" if proc.returncode == 0 else output.splitlines()[:20]
    if proc.returncode != 0:
        first = output.splitlines()[0] if output else "failed"
        log.fail_nonblocking(f"pip check: {first} (recorded; the device stages still run)")
