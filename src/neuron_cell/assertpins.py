"""Assert, after the last pip step of an image build, that the venv holds the cell's pinned versions.

    python -m neuron_cell.assertpins "torch-neuronx==2.13.3.0.* torch==2.13.0+cpu ..."   # a trailing .* pins a family

Run with the venv's Python (neuron_cell on PYTHONPATH): the versions are the venv's installed distributions, compared
by PEP 440 with neuron_cell.pins (`==2.28.7631.0` accepts AWS's `2.28.7631.0+f702b353`). Exit 1 naming each pin that
is not installed.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version

from neuron_cell.pins import satisfies


def wrong_pins(pins: list[str]) -> list[str]:
    """Each pin (`name==version`) the running Python's environment does not satisfy, as a problem."""
    wrong = []
    for pin in pins:
        name, _, wanted = pin.partition("==")
        try:
            found = version(name)
        except PackageNotFoundError:
            wrong.append(f"{name} is not installed (pinned {name}=={wanted})")
            continue
        problem = satisfies(name, wanted, found)
        if problem:
            wrong.append(problem)
    return wrong


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].strip():
        print('usage: python -m neuron_cell.assertpins "NAME==PIN ..."', file=sys.stderr)
        return 2
    wrong = wrong_pins(args[0].split())
    if wrong:
        print("pinned versions not installed: " + "; ".join(wrong), file=sys.stderr)
        return 1
    print("pins installed:", args[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
