"""Lay out a PEP 503 'simple' index from a folder of distribution files."""

from __future__ import annotations

import hashlib
import html
import shutil
from pathlib import Path

from packaging.utils import canonicalize_name


def canonical_name(name: str) -> str:
    """PEP 503's normalised name as pip and PyPI compute it (packaging's, not the toolkit's: the twin is the index)."""
    return str(canonicalize_name(name))


def _project_of(filename: str) -> str:
    return canonical_name(filename.split("-", 1)[0])


def write_index(dists: list[Path], root: Path) -> Path:
    """Copy dists into root/<project>/ with an index.html per project and a root index; return root."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    projects: dict[str, list[Path]] = {}
    for dist in dists:
        projects.setdefault(_project_of(dist.name), []).append(dist)
    for project, files in sorted(projects.items()):
        folder = root / project
        folder.mkdir()
        links = []
        for dist in sorted(files):
            shutil.copy2(dist, folder / dist.name)
            digest = hashlib.sha256(dist.read_bytes()).hexdigest()
            href = f"{html.escape(dist.name)}#sha256={digest}"
            links.append(f'<a href="{href}">{html.escape(dist.name)}</a><br/>')
        (folder / "index.html").write_text("<!DOCTYPE html>\n<html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    root_links = [f'<a href="{p}/">{p}</a><br/>' for p in sorted(projects)]
    (root / "index.html").write_text("<!DOCTYPE html>\n<html><body>\n" + "\n".join(root_links) + "\n</body></html>\n")
    return root
