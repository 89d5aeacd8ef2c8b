"""The padding buckets that would cover a shape sweep: each varying dimension's sizes rounded up to a power of two.

With torch.compile(dynamic=False) every distinct shape is a graph to compile; padding each input up to its bucket
compiles one graph per bucket instead. Each bucket says which swept shapes it covers and the padding it costs: the
share of the bucket's elements that are padding, averaged over the shapes it covers.
"""

from __future__ import annotations

import math
from typing import Any


def suggest(shapes: list[tuple[int, ...]]) -> dict[str, Any]:
    """Bucket boundaries per varying dimension, the buckets with their padding waste, and the compiles they take."""
    distinct = sorted(set(shapes))
    if len(distinct) < 2:
        return {"note": "one shape: nothing to bucket", "boundaries": {}, "compiles_now": len(distinct), "padding": []}
    varying = [d for d in range(len(distinct[0])) if len({s[d] for s in distinct}) > 1]
    boundaries = {str(d): sorted({_bucket(s[d]) for s in distinct}) for d in varying}
    covered: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for s in distinct:
        covered.setdefault(tuple(_bucket(v) if d in varying else v for d, v in enumerate(s)), []).append(s)
    padding = [
        {"bucket": _name(b), "covers": [_name(s) for s in group], "waste": _waste(b, group)}
        for b, group in sorted(covered.items())
    ]
    dims = ", ".join(f"dim {d}: {b}" for d, b in boundaries.items())
    note = (
        f"padding to buckets ({dims}) would compile {len(covered)} graph(s) instead of {len(distinct)}"
        if len(covered) < len(distinct)
        else f"padding to power-of-two buckets ({dims}) would not save compiles: {len(distinct)} graph(s) either way"
    )
    return {
        "boundaries": boundaries,
        "compiles_now": len(distinct),
        "compiles_bucketed": len(covered),
        "padding": padding,
        "note": note,
    }


def lines(found: dict[str, Any]) -> list[str]:
    """One line a bucket: the shapes it covers and its padding waste."""
    return [f"bucket {p['bucket']} covers {', '.join(p['covers'])}: {p['waste']:.0%} padding" for p in found["padding"]]


def _bucket(value: int) -> int:
    return 1 << max(0, math.ceil(math.log2(value)))


def _name(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def _waste(bucket: tuple[int, ...], group: list[tuple[int, ...]]) -> float:
    return 1.0 - sum(math.prod(s) for s in group) / (len(group) * math.prod(bucket))
