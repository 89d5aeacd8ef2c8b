"""neuron_smoke.evaluate.shapes.parse_shapes: --shapes parsed and bounded without torch."""

from __future__ import annotations

import pytest

from neuron_smoke.errors import UsageError
from neuron_smoke.evaluate.shapes import MAX_ELEMENTS, parse_shapes


def test_shapes_are_parsed_in_order() -> None:
    assert parse_shapes("1x128, 8X128,,4") == [(1, 128), (8, 128), (4,)]


@pytest.mark.parametrize(
    ("text", "why"),
    [("8xfoo", "is not a shape like 8x128"), ("0x4", "has a dimension <= 0"), (" , ", "at least one shape")],
)
def test_bad_shapes_are_refused(text: str, why: str) -> None:
    with pytest.raises(UsageError, match=why):
        parse_shapes(text)


def test_a_shape_past_the_element_bound_is_refused_before_any_allocation() -> None:
    assert parse_shapes(f"1x{MAX_ELEMENTS}") == [(1, MAX_ELEMENTS)]
    with pytest.raises(UsageError, match=r"more elements than the 1073741824 \(2\^30\)"):
        parse_shapes("1x99999999999")
