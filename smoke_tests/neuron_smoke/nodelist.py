"""Slurm's hostlist syntax (`SLURM_JOB_NODELIST`): `trn[1-3,5],gpu7` is trn1, trn2, trn3, trn5 and gpu7.

A list is comma-separated at the top level; each item is a name whose bracket groups hold comma-separated numbers
and ranges (`[01-03]` keeps the zero padding: 01, 02, 03); several groups in one name expand to every combination
(`r[1-2]n[1-2]`: r1n1, r1n2, r2n1, r2n2), in Slurm's order. Torch-free, standard library only.
"""

from __future__ import annotations

import re

MAX_HOSTS = 100_000  # a list that expands beyond this is not a job's nodes
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


class NodelistError(ValueError):
    """The text is not a Slurm hostlist; the message names the part that is not."""


def expand(text: str) -> list[str]:
    """Every host of the list, in order."""
    hosts: list[str] = []
    for item in _top_level(text.strip()):
        if not item:
            raise NodelistError(f"{text!r}: an empty host name (two commas, or a comma at an end)")
        hosts += _expand_item(item, text)
        if len(hosts) > MAX_HOSTS:
            raise NodelistError(f"{text!r}: expands to more than {MAX_HOSTS} hosts")
    if not hosts:
        raise NodelistError("an empty node list")
    return hosts


def first_host(text: str) -> str:
    """The list's first host: Slurm's node of rank 0, where the rendezvous's master runs."""
    return expand(text)[0]


def _top_level(text: str) -> list[str]:
    """The items between commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise NodelistError(f"{text!r}: a bracket inside a bracket")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise NodelistError(f"{text!r}: a ']' without its '['")
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise NodelistError(f"{text!r}: a '[' without its ']'")
    items.append(text[start:])
    return items


def _expand_item(item: str, text: str) -> list[str]:
    head, bracket, rest = item.partition("[")
    if not bracket:
        return [item]
    inside, _, tail = rest.partition("]")
    return [head + number + more for number in _numbers(inside, text) for more in _expand_item(tail, text)]


def _numbers(inside: str, text: str) -> list[str]:
    out: list[str] = []
    for part in inside.split(","):
        match = _RANGE.fullmatch(part.strip())
        if not match:
            raise NodelistError(f"{text!r}: [{inside}] holds {part!r}, not a number or a range such as 1-3")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise NodelistError(f"{text!r}: the range {part} runs backwards")
        if int(high) - int(low) >= MAX_HOSTS:
            raise NodelistError(f"{text!r}: the range {part} holds more than {MAX_HOSTS} hosts")
        width = len(low) if low.startswith("0") and len(low) > 1 else 0
        out += [str(n).zfill(width) for n in range(int(low), int(high) + 1)]
    return out
