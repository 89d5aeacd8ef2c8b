"""The one error boundary of the commands (`neuron-torch`, `verify-device`): whatever happens below `main`, the user
reads one line, never a traceback. Standard library only: verify-device runs it with the cell's Python.

An expected error is its message and exit code (each command maps its own error types); Ctrl-C is one line and exit
130; anything else is one line naming a log file that holds the traceback (exit 1). Messages quote user data through
`quote` (at most QUOTE_LIMIT characters of it); `clip` bounds every line of a message that quotes data some other way
(a lock line, a parser's error).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command ended by Ctrl-C
QUOTE_LIMIT = 200
LINE_LIMIT = 600  # a message line may hold a path, a quote and the fix around it


class OneLineParser(argparse.ArgumentParser):
    """argparse with its usage errors in one line, naming --help, instead of the whole usage text before them."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        """Every value given, converted by the action's type; an empty one refused. `--cell "$UNSET"` would otherwise
        be taken as given: an option left at its default (no pins checked), or '' as a Path, the current folder."""
        passed_on = action.nargs in (argparse.PARSER, argparse.REMAINDER)  # a subcommand's: its parser checks them
        if not passed_on and not arg_string.strip():
            optional = action.option_strings and not action.required
            leave = f", or leave {action.option_strings[0]} out for its default" if optional else ""
            raise argparse.ArgumentError(action, f"is empty: give a value{leave}")
        return super()._get_value(action, arg_string)  # argparse's own, private (the same in Python 3.11 to 3.14)


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """`value` for a message: repr-quoted (control characters and NULs escaped), at most `limit` characters of it."""
    text = str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


def clip(message: str, limit: int = LINE_LIMIT) -> str:
    """The message with each line cut to `limit` characters, so no input can make an error message long."""
    return "\n".join(line if len(line) <= limit else f"{line[:limit]}... (cut)" for line in message.splitlines())


def state_dir(program: str) -> Path:
    """Where a crash log goes: $XDG_STATE_HOME/PROGRAM, else ~/.local/state/PROGRAM."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / program


def write_crash_log(program: str, error: BaseException) -> Path:
    """The traceback in a new file of the state folder (or of the temp folder when that cannot be written)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = f"crash-{stamp}-{os.getpid()}.log"
    text = f"{program} {' '.join(sys.argv[1:])}\n" + "".join(traceback.format_exception(error))
    for folder in (state_dir(program), Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / (name if folder.name == program else f"{program}-{name}")
            path.write_text(text, encoding="utf-8")
            return path
        except OSError:
            continue
    raise error


def guard(program: str, body: Callable[[], int], interrupted_note: str = "nothing was left half-written") -> int:
    """Run a command's body; an interrupt or an unexpected error ends in one line on stderr."""
    try:
        return body()
    except KeyboardInterrupt:
        print(f"{program}: interrupted (Ctrl-C); {interrupted_note}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as error:
        log = write_crash_log(program, error)
        first = (str(error).strip().splitlines() or [""])[0]
        print(
            f"{program}: internal error: {type(error).__name__}: {quote(first)}; the traceback is in {log} "
            "(please attach it to an issue)",
            file=sys.stderr,
        )
        return 1
