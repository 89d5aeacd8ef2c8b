"""HCL values, as Packer reads them: JSON escaping plus HCL's own template escapes."""

from __future__ import annotations

import json
import textwrap

HclValue = str | bool | list[str] | dict[str, str]


def hcl_string(value: str) -> str:
    """An HCL quoted string: JSON escaping plus HCL's own template escapes."""
    return json.dumps(value).replace("${", "$${").replace("%{", "%%{")


def hcl_heredoc(value: str, indent: int = 6, width: int = 110) -> str:
    """A long message as an HCL heredoc (`<<-EOT`): its words wrapped at `width` columns, each line indented by
    `indent`, HCL's template sequences escaped; newlines in it are kept. Packer joins the lines back with newlines."""
    pad = " " * indent
    escaped = value.replace("${", "$${").replace("%{", "%%{")
    if "EOT" in escaped.split():
        raise ValueError("a heredoc's text may not hold the marker line EOT")
    lines = [line for part in escaped.splitlines() for line in textwrap.wrap(part, width - indent) or [""]]
    body = "".join(f"{pad}{line}\n" for line in lines)
    return f"<<-EOT\n{body}{' ' * (indent - 2)}EOT"


def hcl_value(value: HclValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return hcl_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(hcl_string(v) for v in value) + "]"
    return "{ " + ", ".join(f"{hcl_string(k)} = {hcl_string(v)}" for k, v in value.items()) + " }"
