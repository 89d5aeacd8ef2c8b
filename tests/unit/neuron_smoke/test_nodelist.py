"""neuron_smoke.nodelist: Slurm's hostlist syntax, expanded in Slurm's order."""

from __future__ import annotations

import pytest

from neuron_smoke.nodelist import NodelistError, expand, first_host


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("trn[1-3,5],gpu7", ["trn1", "trn2", "trn3", "trn5", "gpu7"]),
        ("node7", ["node7"]),
        ("trn[01-03]", ["trn01", "trn02", "trn03"]),  # zero padding kept
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("a,b[9-10]-x", ["a", "b9-x", "b10-x"]),
        (" ip-10-0-0-[4,7] ", ["ip-10-0-0-4", "ip-10-0-0-7"]),
    ],
)
def test_expand(text: str, hosts: list[str]) -> None:
    assert expand(text) == hosts
    assert first_host(text) == hosts[0]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("trn[1-3", "a '[' without its ']'"),
        ("trn1-3]", "a ']' without its '['"),
        ("trn[a-b]", "not a number or a range"),
        ("trn[5-2]", "runs backwards"),
        ("a,,b", "an empty host name"),
        ("", "an empty host name"),
        ("t[[1]]", "a bracket inside a bracket"),
        ("t[0-999999]", "more than 100000 hosts"),
    ],
)
def test_bad_lists_name_the_part_that_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(NodelistError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        expand(text)
