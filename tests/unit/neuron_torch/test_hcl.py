"""neuron_torch.hcl: values as Packer reads them. A string is JSON-quoted and HCL's template sequences (`${`, `%{`)
are escaped so that they stay literal; booleans, lists and maps take HCL's own spelling."""

from __future__ import annotations

import json

import pytest

from neuron_torch.hcl import hcl_heredoc, hcl_string, hcl_value


def unescape_hcl(quoted: str) -> str:
    """What HCL reads from a quoted string: JSON's escapes, then `$${` -> `${` and `%%{` -> `%{`."""
    read: str = json.loads(quoted.replace("$${", "${").replace("%%{", "%{"))
    return read


@pytest.mark.parametrize(
    "value",
    ["plain", 'say "hi"\n\ttab \\ back', "${var.region}", "%{ if x }y%{ endif }", "$$ and %% alone", "ünïcode €"],
)
def test_a_string_round_trips_and_leaves_no_template_sequence(value: str) -> None:
    quoted = hcl_string(value)
    assert quoted.startswith('"') and quoted.endswith('"')
    assert unescape_hcl(quoted) == value
    # every ${ or %{ left in the text is escaped: preceded by its doubled sigil
    for sigil in "$%":
        assert quoted.count(sigil + "{") == quoted.count(sigil * 2 + "{")


def test_interpolation_is_escaped_exactly() -> None:
    assert hcl_string("a${b}c") == '"a$${b}c"'
    assert hcl_string("%{x}") == '"%%{x}"'
    assert hcl_string("$x {y}") == '"$x {y}"'  # no template sequence: unchanged


def test_booleans_lists_and_maps() -> None:
    assert hcl_value(True) == "true" and hcl_value(False) == "false"
    assert hcl_value("yes") == hcl_string("yes")
    items = ["a", "${b}"]
    assert hcl_value(items) == "[" + ", ".join(hcl_string(v) for v in items) + "]"
    assert hcl_value([]) == "[]"
    tags = {"Name": "nt ${cell}", "Owner": 'o"q'}
    assert hcl_value(tags) == '{ "Name" = "nt $${cell}", "Owner" = "o\\"q" }'


def test_hcl_heredoc_wraps_a_long_message_into_short_escaped_lines() -> None:
    message = "The cell_id must be one of " + ", ".join(f"cell-{n}" for n in range(40)) + ". Use ${x} or %{y}."
    text = hcl_heredoc(message, indent=6, width=60)
    lines = text.splitlines()
    assert lines[0] == "<<-EOT" and lines[-1] == "    EOT"
    assert all(len(line) <= 60 and line.startswith("      ") for line in lines[1:-1])
    # Packer strips the common indent and keeps the line breaks: the words are the message's, escaped for HCL.
    assert " ".join(line.strip() for line in lines[1:-1]) == message.replace("${", "$${").replace("%{", "%%{")


def test_hcl_heredoc_refuses_text_holding_its_marker() -> None:
    with pytest.raises(ValueError, match="marker"):
        hcl_heredoc("a line\nEOT\nmore")
