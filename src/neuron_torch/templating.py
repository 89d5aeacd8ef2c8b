"""The Jinja2 environment of the emitters: `*.j2` templates in `neuron_torch/templates/`, rendered byte for byte.

Whitespace control: a block tag's line leaves nothing in the output (`trim_blocks`, `lstrip_blocks`), a file's final
newline is kept, and an undefined name is an error, never an empty string. Values are escaped by filters of the
format they go into (`hcl`, `hcl_string`, `hcl_heredoc`, `json`), never by HTML autoescaping.
"""

from __future__ import annotations

import json
from functools import cache
from typing import TYPE_CHECKING, Any

from neuron_torch.hcl import hcl_heredoc, hcl_string, hcl_value

if TYPE_CHECKING:
    import jinja2


@cache
def environment() -> jinja2.Environment:
    import jinja2  # at first use: `neuron-torch --version`, `matrix` and the lock gate need no Jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("neuron_torch", "templates"),
        autoescape=False,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(hcl=hcl_value, hcl_heredoc=hcl_heredoc, hcl_string=hcl_string, json=json.dumps)
    return env


def render_template(name: str, **values: Any) -> str:
    return environment().get_template(name).render(**values)
