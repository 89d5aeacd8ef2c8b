"""neuron_torch.hints: a fix hint (`neuron-torch COMMAND ...`) in a message repeats the options the user gave
(--project, --matrix, and --mirror for the commands that take one), quoted for a shell, so following it acts on the
same release; other text is left as it is."""

from __future__ import annotations

import argparse
import shlex

from neuron_torch.hints import with_options


def namespace(project: str | None = None, matrix: str | None = None, **extra: object) -> argparse.Namespace:
    return argparse.Namespace(project=project, matrix=matrix, **extra)


def test_no_options_leave_the_message_unchanged() -> None:
    message = "missing: run `neuron-torch lock --cell c1`; see the README"
    assert with_options(message, namespace()) == message
    assert with_options(message, namespace(mirror=None)) == message


def test_project_and_matrix_go_before_the_command_quoted() -> None:
    args = namespace(project="/my project", matrix="constraints/test-matrix.toml")
    got = with_options("run `neuron-torch render` then `neuron-torch check`", args)
    front = f"--project {shlex.quote('/my project')} --matrix constraints/test-matrix.toml"
    assert got == f"run `neuron-torch {front} render` then `neuron-torch {front} check`"
    assert shlex.split(got.split("`")[1])[:5] == ["neuron-torch", "--project", "/my project", "--matrix", args.matrix]


def test_the_mirror_is_added_only_to_commands_that_take_it() -> None:
    args = namespace(mirror="/etc/nt mirror.toml")
    quoted = shlex.quote(args.mirror)
    for command in ("cell", "lock", "bundle", "build"):
        assert with_options(f"`neuron-torch {command} x`", args) == f"`neuron-torch {command} x --mirror {quoted}`"
    for command in ("check", "render", "matrix"):
        assert with_options(f"`neuron-torch {command} x`", args) == f"`neuron-torch {command} x`"


def test_a_hint_that_names_its_mirror_keeps_it() -> None:
    hint = "`neuron-torch lock --cell c1 --mirror other.toml`"
    assert with_options(hint, namespace(mirror="mine.toml")) == hint


def test_text_that_is_not_a_hint_is_untouched() -> None:
    args = namespace(matrix="m.toml", mirror="x.toml")
    message = "neuron-torch lock failed (`pip install neuron-torch`, `neuron-torch`)"
    assert with_options(message, args) == message
