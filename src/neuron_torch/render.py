"""`neuron-torch render`: every file derived from the matrix, written or checked for staleness.

Each renderer maps the matrix to {path: content}. Generated files carry a header that names the generator; the
README's generated sections sit between marker comments.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from neuron_torch.cellinfo import caveats, cell_record
from neuron_torch.errors import NeuronTorchError
from neuron_torch.files import check_output_file, is_staged, replace_text
from neuron_torch.generated import banner, header, is_release_matrix
from neuron_torch.matrix import Matrix
from neuron_torch.render_ansible import ansible_vars
from neuron_torch.render_ci import workflow_files
from neuron_torch.render_packer import packer_files
from neuron_torch.templating import render_template

Renderer = Callable[[Matrix], dict[Path, str]]


def constraint_files(matrix: Matrix) -> dict[Path, str]:
    files = {}
    for cell in matrix.cells:
        lines = [
            header(matrix).rstrip(),
            f"# {matrix.release.name}, cell {cell.id}. Use with pip's -c; for hash-checked installs use the lock.",
            *(f"# caveat: {note}" for note in caveats(matrix, cell)),
            *(f"{name}=={version}" for name, version in cell.pins.items()),
        ]
        files[cell.constraints_path] = "\n".join(lines) + "\n"
    return files


def cell_files(matrix: Matrix) -> dict[Path, str]:
    files = {}
    for cell in matrix.cells:
        record = {"_generated": banner(matrix), **cell_record(matrix, cell)}
        files[cell.record_path] = json.dumps(record, indent=2) + "\n"
    return files


def readme_sections(matrix: Matrix) -> dict[Path, str]:
    """The README's support table; only the real release renders into the README."""
    readme = matrix.root / "README.md"
    if not is_release_matrix(matrix) or not readme.is_file():
        return {}
    groups = ("instance_families", "os", "python", "arch")
    body = render_template(
        "support-matrix.md.j2",
        cells=matrix.cells,
        apt_packages=matrix.apt.packages,
        refused=[item for group in groups for item in getattr(matrix.unsupported, group).items()],
    ).rstrip("\n")
    text = replace_section(readme.read_text(), "support-matrix", body, matrix)
    return {readme: text}


def replace_section(text: str, name: str, body: str, matrix: Matrix) -> str:
    begin = f"<!-- BEGIN {name}: " + banner(matrix) + " -->"
    end = f"<!-- END {name} -->"
    pattern = re.compile(rf"<!-- BEGIN {re.escape(name)}:.*?-->.*?<!-- END {re.escape(name)} -->", re.DOTALL)
    if not pattern.search(text):
        raise NeuronTorchError(f"README.md has no '<!-- BEGIN {name}: ... -->' / '{end}' markers to render into")
    return pattern.sub(lambda _: f"{begin}\n{body}\n{end}", text, count=1)


def smoke_instance_facts(matrix: Matrix) -> dict[Path, str]:
    """The documented device counts, for verify-device, which runs where the toolkit is not installed."""
    if not is_release_matrix(matrix):
        return {}
    path = matrix.root / "smoke_tests" / "neuron_smoke" / "neuron_instances.json"
    return {path: json.dumps(instance_facts(matrix), indent=2) + "\n"}


def instance_facts(matrix: Matrix) -> dict[str, object]:
    """What verify-device reads of a release: device counts, the peak of one physical NeuronCore (its throughput
    floor), the instance types it supports, and the fabric its cluster stages check (the test release's are written
    where its tests point `NEURON_SMOKE_INSTANCE_FACTS`)."""
    instances = matrix.instances.values()
    core_peaks = {i.type: matrix.instance_families[i.family].core_peak_tflops() for i in instances}
    table = matrix.instance_table()
    return {
        "_generated": banner(matrix),
        "release": matrix.release.name,
        "logical_devices": {i.type: i.expected_devices for i in instances if i.expected_devices},
        "undocumented": sorted(i.type for i in instances if not i.expected_devices),
        "core_peak_tflops": {t: peaks for t, peaks in core_peaks.items() if peaks},
        "fabric": {
            "provider": matrix.fabric.provider,
            "note": matrix.fabric.note,
            "efa_devices": {i.type: i.efa_devices for i in instances if i.efa_devices},
            "efa_undocumented": sorted(i.type for i in instances if not i.efa_devices),
        },
        "compiler": {"default_precision": matrix.compiler.default_precision, "note": matrix.compiler.note},
        "support": {  # neuron_cell.instances.InstanceTable: which instance types the release supports, and why not
            "known": dict(table.known),
            "families": list(table.families),
            "unsupported": dict(table.unsupported),
        },
    }


RENDERERS: list[Renderer] = [
    constraint_files,
    cell_files,
    readme_sections,
    smoke_instance_facts,
    ansible_vars,
    packer_files,
    workflow_files,
]


def rendered(matrix: Matrix) -> dict[Path, str]:
    files: dict[Path, str] = {}
    for renderer in RENDERERS:
        files.update(renderer(matrix))
    return files


def stale_files(matrix: Matrix) -> list[Path]:
    """Generated files whose content differs from a fresh rendering (or that are missing)."""
    files = rendered(matrix)
    stale = [path for path, content in files.items() if not path.is_file() or path.read_text("utf-8") != content]
    stale += [p for p in _present(matrix) if p not in files]
    return stale


def _present(matrix: Matrix) -> list[Path]:
    """The files in the generated folder, less those another render is writing now (files.is_staged)."""
    if not matrix.generated_dir.is_dir():
        return []
    return [p for p in sorted(matrix.generated_dir.iterdir()) if p.is_file() and not is_staged(p)]


def check_render_targets(matrix: Matrix) -> None:
    """Before anything is written: every generated file that would change can be written (no folder in its place, its
    folder writable), so a read-only checkout is named at once and not after half the files."""
    for path, content in rendered(matrix).items():
        if not (path.is_file() and path.read_text(encoding="utf-8") == content):
            check_output_file(path, "render:")


def write_rendered(matrix: Matrix) -> list[Path]:
    """Write every generated file and remove generated files no cell needs any more; return what changed."""
    files = rendered(matrix)
    changed = []
    for orphan in [p for p in _present(matrix) if p not in files]:
        orphan.unlink()
        changed.append(orphan)
    for path, content in files.items():
        if path.is_file() and path.read_text(encoding="utf-8") == content:
            continue
        replace_text(path, content)
        changed.append(path)
    return changed
