"""HCL values, as Packer reads them: JSON escaping plus HCL's own template escapes."""

from __future__ import annotations

import json

HclValue = str | bool | list[str] | dict[str, str]


def hcl_string(value: str) -> str:
    """An HCL quoted string: JSON escaping plus HCL's own template escapes."""
    return json.dumps(value).replace("${", "$${").replace("%{", "%%{")


def hcl_value(value: HclValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return hcl_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(hcl_string(v) for v in value) + "]"
    return "{ " + ", ".join(f"{hcl_string(k)} = {hcl_string(v)}" for k, v in value.items()) + " }"
