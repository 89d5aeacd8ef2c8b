"""Shared by the suite's unit tests: release_facts.load caches the facts file it read, so each test starts with no
cache (a test that names another release's facts file must not leave it to the next test in its process)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from neuron_smoke import release_facts


@pytest.fixture(autouse=True)
def fresh_release_facts() -> Iterator[None]:
    release_facts.load.cache_clear()
    yield
    release_facts.load.cache_clear()
