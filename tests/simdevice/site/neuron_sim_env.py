"""The simulated device's comma-separated name lists in the environment (tests only): NEURON_SIM_INJECT (the fault
injectors) and NEURON_SIM_RULES_OFF (the runtime rules turned off)."""

from __future__ import annotations

import os


def names(variable: str, known: tuple[str, ...], what: str, error: type[Exception]) -> set[str]:
    """The names in $variable (blanks dropped), each one of `known`; else `error` naming the unknown `what`."""
    found = {n.strip() for n in os.environ.get(variable, "").split(",") if n.strip()}
    unknown = found - set(known)
    if unknown:
        raise error(f"unknown {variable} {what} {sorted(unknown)}; known: {', '.join(known)}")
    return found
