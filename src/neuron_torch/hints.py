"""Fix hints (`neuron-torch COMMAND ...`) in messages, completed with the options the user gave."""

from __future__ import annotations

import argparse
import re
import shlex

_HINT = re.compile(r"`neuron-torch (?P<command>[a-z]+)(?P<rest>[^`]*)`")
_MIRROR_COMMANDS = {"cell", "lock", "bundle", "build"}


def with_options(message: str, args: argparse.Namespace) -> str:
    """Fix hints (`neuron-torch COMMAND ...`) repeat the options the user gave, so following them acts on the same
    release, project and mirror."""
    front = "".join(
        f" {flag} {shlex.quote(str(value))}"
        for flag, value in (("--project", args.project), ("--matrix", args.matrix))
        if value is not None
    )
    mirror = getattr(args, "mirror", None)

    def repeat(hint: re.Match[str]) -> str:
        rest = hint["rest"]
        if mirror is not None and hint["command"] in _MIRROR_COMMANDS and "--mirror" not in rest:
            rest += f" --mirror {shlex.quote(str(mirror))}"
        return f"`neuron-torch{front} {hint['command']}{rest}`"

    return _HINT.sub(repeat, message)
