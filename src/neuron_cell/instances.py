"""Whether a release supports an EC2 instance type, and why not: the one judgement `neuron-torch instance` makes from
the matrix and verify-device makes from the facts rendered beside it (neuron_instances.json). Standard library only."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from neuron_cell.boundary import quote

# An EC2 size: 48xlarge, 3xlarge, xlarge, large, metal, metal-48xl.
INSTANCE_SIZE = re.compile(r"(\d*x)?large|metal(-\d+xl)?")


class UnsupportedInstance(ValueError):
    """An instance type the release does not support (its family refused, not a Trainium family, a malformed size)."""


@dataclass(frozen=True)
class InstanceTable:
    release: str
    known: Mapping[str, str]  # the instance types the release lists: type -> family
    families: Sequence[str]  # the families it supports
    unsupported: Mapping[str, str]  # the families it refuses: family -> reason


@dataclass(frozen=True)
class Judged:
    family: str
    listed: bool  # False: a size of a supported family the release does not list (its counts are unknown)


def judge(table: InstanceTable, instance_type: str) -> Judged:
    """The family of `instance_type` and whether the release lists it, or UnsupportedInstance naming the reason."""
    if instance_type in table.known:
        return Judged(table.known[instance_type], listed=True)
    known = ", ".join(table.known)
    plain = instance_type.strip().lower()
    if plain != instance_type:  # EC2 and IMDS spell every type in lower case: the one a user meant is named
        raise UnsupportedInstance(
            f"instance type {quote(instance_type)}: EC2 instance types are lower case, without spaces: give "
            f"{quote(plain)}"
        )
    family = instance_type.split(".", 1)[0]
    reason = table.unsupported.get(family)
    if reason:
        raise UnsupportedInstance(f"instance type {instance_type} is not supported: {reason}. Supported: {known}")
    if family in table.families:
        size = instance_type.partition(".")[2]
        if not INSTANCE_SIZE.fullmatch(size):
            raise UnsupportedInstance(
                f"instance type {quote(instance_type)}: {quote(size)} is not an EC2 instance size (such as 48xlarge, "
                f"3xlarge or metal); known types: {known}"
            )
        return Judged(family, listed=False)
    raise UnsupportedInstance(
        f"instance type {quote(instance_type)} is not supported; supported families: {', '.join(table.families)} "
        f"(known types: {known})"
    )
