"""Unit tests of neuron_torch.templating: the emitters' Jinja2 environment (block lines leave nothing, the final
newline is kept, an undefined name is an error, values are escaped by the format's filters, not as HTML)."""

from __future__ import annotations

import jinja2
import pytest

from neuron_torch.hcl import hcl_string
from neuron_torch.templating import environment, render_template


def test_block_lines_leave_nothing_and_the_final_newline_stays() -> None:
    template = environment().from_string("a\n  {% for x in xs %}\n- {{ x }}\n  {% endfor %}\nb\n")
    assert template.render(xs=[1, 2]) == "a\n- 1\n- 2\nb\n"


def test_values_go_through_the_format_filters_not_html_escaping() -> None:
    template = environment().from_string("{{ v }} {{ v | hcl }} {{ v | hcl_string }} {{ items | json }}")
    value = '<a href="x">${var}</a>'
    assert template.render(v=value, items=["a", 1]) == f'{value} {hcl_string(value)} {hcl_string(value)} ["a", 1]'
    assert "$${var}" in hcl_string(value)


def test_an_undefined_name_is_an_error() -> None:
    with pytest.raises(jinja2.UndefinedError, match="'missing' is undefined"):
        environment().from_string("{{ missing }}").render()
    with pytest.raises(jinja2.UndefinedError):
        render_template("cell.pkrvars.hcl.j2", banner="b", release="r", cell_id="c")  # no variables, no width


def test_render_template_reads_the_package_templates() -> None:
    text = render_template(
        "cell.pkrvars.hcl.j2",
        banner="BANNER",
        release="rel",
        cell_id="cell-1",
        variables={"ab": "x", "c": True},
        width=2,
    )
    assert text == "# BANNER\n# rel, cell cell-1: packer build -var-file=THIS_FILE images/ (see images/README.md)\n" + (
        'ab = "x"\nc  = true\n'
    )
    assert environment() is environment()
    with pytest.raises(jinja2.TemplateNotFound):
        render_template("no-such.j2")
