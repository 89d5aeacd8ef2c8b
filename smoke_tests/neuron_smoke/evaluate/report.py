"""The evaluation report: JSON (the machine-readable source), Markdown (with PNGs beside it) and one self-contained
HTML file (the same sections, PNGs embedded as base64). Markdown and HTML are rendered from the JSON data only."""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path
from typing import Any

from neuron_cell.outputs import write_whole
from neuron_smoke.evaluate.sections import Section, build_sections


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else ("-inf" if value < 0 else "nan")
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def write_json(data: dict[str, Any], path: Path) -> None:
    write_whole(path, (json.dumps(_json_safe(data), separators=(",", ":")) + "\n").encode())


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def to_markdown(sections: list[Section], title: str) -> str:
    lines = [f"# {title}", ""]
    for s in sections:
        lines += [f"## {s.title}", ""]
        for t in s.text:
            lines += [t, ""]
        if s.image is not None:
            lines += [f"![{s.title}]({s.image[0]})", ""]
        if s.headers:
            lines.append("| " + " | ".join(s.headers) + " |")
            lines.append("|" + "---|" * len(s.headers))
            lines += ["| " + " | ".join(cell(v).replace("|", "\\|") for v in row) + " |" for row in s.rows]
            lines.append("")
    return "\n".join(lines)


STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
    "table{border-collapse:collapse;font-size:13px;margin:0.5em 0 1.5em}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f0f0f0}"
    "td.bad{background:#fdd}img{max-width:100%}"
)


def to_html(sections: list[Section], title: str) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"]
    parts.append(f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>")
    for s in sections:
        parts.append(f"<h2>{html.escape(s.title)}</h2>")
        parts += [f"<p>{html.escape(t)}</p>" for t in s.text]
        if s.image is not None:
            b64 = base64.b64encode(s.image[1]).decode()
            parts.append(f"<img alt='{html.escape(s.title)}' src='data:image/png;base64,{b64}'>")
        if s.headers:
            parts.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in s.headers) + "</tr>")
            for row in s.rows:
                cells = "".join(_html_cell(v) for v in row)
                parts.append(f"<tr>{cells}</tr>")
            parts.append("</table>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _html_cell(value: Any) -> str:
    text = html.escape(cell(value))
    return f"<td class='bad'>{text}</td>" if text in ("FAIL", "inf") else f"<td>{text}</td>"


def write_all(data: dict[str, Any], out_dir: Path) -> list[Path]:
    """report.json, report.md (+ its PNGs) and report.html in out_dir."""
    sections = build_sections(data)
    title = f"Model evaluation: {data['model']['name']} on {data['device']['backend']}"
    written = [out_dir / "report.json", out_dir / "report.md", out_dir / "report.html"]
    write_json(data, written[0])
    for s in sections:
        if s.image is not None:
            write_whole(out_dir / s.image[0], s.image[1])
            written.append(out_dir / s.image[0])
    write_whole(written[1], to_markdown(sections, title).encode())
    write_whole(written[2], to_html(sections, title).encode())
    return written
