"""neuron_smoke.evaluate.buckets: power-of-two buckets over the swept shapes, the compiles they take, their padding."""

from __future__ import annotations

import pytest

from neuron_smoke.evaluate import buckets


def test_one_shape_has_nothing_to_bucket() -> None:
    assert buckets.suggest([(8, 128), (8, 128)]) == {
        "note": "one shape: nothing to bucket",
        "boundaries": {},
        "compiles_now": 1,
        "padding": [],
    }


def test_each_bucket_names_the_shapes_it_covers_and_their_padding_waste() -> None:
    found = buckets.suggest([(3, 100), (5, 100), (8, 100)])
    assert found["boundaries"] == {"0": [4, 8]} and (found["compiles_now"], found["compiles_bucketed"]) == (3, 2)
    assert [(p["bucket"], p["covers"]) for p in found["padding"]] == [
        ("4x100", ["3x100"]),
        ("8x100", ["5x100", "8x100"]),
    ]
    assert [p["waste"] for p in found["padding"]] == pytest.approx([0.25, 1 - 13 / 16])
    assert buckets.lines(found) == [
        "bucket 4x100 covers 3x100: 25% padding",
        "bucket 8x100 covers 5x100, 8x100: 19% padding",
    ]
    assert "would compile 2 graph(s) instead of 3" in found["note"]


def test_buckets_in_two_dimensions_and_shapes_padding_cannot_merge() -> None:
    found = buckets.suggest([(1, 128), (8, 128), (8, 512), (8, 300), (8, 500)])
    assert found["boundaries"] == {"0": [1, 8], "1": [128, 512]}
    assert (found["compiles_now"], found["compiles_bucketed"]) == (5, 3)
    assert [p["bucket"] for p in found["padding"]] == ["1x128", "8x128", "8x512"]
    powers = buckets.suggest([(1, 100), (2, 100), (4, 100)])
    assert powers["compiles_bucketed"] == 3 and all(p["waste"] == 0 for p in powers["padding"])
    assert "would not save compiles: 3 graph(s) either way" in powers["note"]
