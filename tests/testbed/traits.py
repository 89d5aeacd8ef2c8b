"""The real targets' traits (traits.toml), as the test bed applies them and the tests read them back."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path
from typing import Any

TRAITS_FILE = Path(__file__).resolve().parent / "traits.toml"


@cache
def traits() -> dict[str, Any]:
    with TRAITS_FILE.open("rb") as handle:
        return tomllib.load(handle)


def labelled(name: str, version: str) -> str:
    """The version as AWS's wheel carries it: with the package's local label, when it has one."""
    label = traits()["wheels"].get(name, {}).get("local_label")
    return f"{version}+{label}" if label else version


def requires(name: str) -> tuple[str, ...]:
    """The Requires-Dist a fixture of `name` carries (as close to the real package's as is known)."""
    return tuple(traits()["wheels"].get(name, {}).get("requires", ()))
