"""neuron_smoke.stage_consistency: the majority names the odd node; the graph fingerprint is stable and sees a
different lowering."""

from __future__ import annotations

import pytest
import torch

from neuron_smoke import stage_consistency
from neuron_smoke.backends import CPU
from neuron_smoke.context import Context, Options


def facts(**changed: str) -> dict[str, str]:
    return {"torch": "2.13.0", "graph": "abc", "cell": "c", **changed}


def test_all_equal() -> None:
    assert stage_consistency.compare({r: facts() for r in range(4)}, 0) == ([], {})


def test_the_odd_node_fails_and_the_majority_notes_it() -> None:
    found = {0: facts(), 1: facts(torch="2.13.1"), 2: facts(), 3: facts(graph="def")}
    problems, others = stage_consistency.compare(found, 1)
    assert problems == ["torch differs: this node (node 1) has 2.13.1, node 0, 2, 3 2.13.0"]
    assert others == {3: ["graph def, node 0, 1, 2 abc"]}  # node 1 is in the graph's majority
    assert stage_consistency.compare(found, 0) == (
        [],
        {1: ["torch 2.13.1, node 0, 2, 3 2.13.0"], 3: ["graph def, node 0, 1, 2 abc"]},
    )


def test_without_a_majority_every_node_fails() -> None:
    found = {0: facts(), 1: facts(torch="2.13.1")}
    for me in (0, 1):
        problems, others = stage_consistency.compare(found, me)
        assert problems == ["torch differs with no majority: node 0 has 2.13.0; node 1 has 2.13.1"] and not others


def test_the_graph_fingerprint_is_stable_and_sees_another_lowering(monkeypatch: pytest.MonkeyPatch) -> None:
    first = stage_consistency.graph_fingerprint()
    assert first == stage_consistency.graph_fingerprint() and len(first) == 64
    gelu = torch.nn.functional.gelu
    monkeypatch.setattr(torch.nn.functional, "gelu", lambda x, approximate="none": gelu(x, approximate="tanh"))
    assert stage_consistency.graph_fingerprint() != first


def test_local_facts_name_every_field() -> None:
    found = stage_consistency.local_facts(Context(options=Options(cell={"id": "2.13-x"}), backend=CPU))
    assert found["torch imported"] == torch.__version__ and found["cell"] == "2.13-x"
    assert {
        "python",
        "torch",
        "torch-neuronx",
        "neuronx-cc",
        "nki",
        "neuron runtime",
        "neuron collectives",
        "neuron driver",
    } <= set(found)
