"""The fast tier's order under pytest-xdist (tests/conftest.py): each worker's first batch of
tests holds its share of those marked ``waits``, early in the batch, and no test is lost."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from tests.conftest import first_batches, spread_waiting


def item(name: str, waits: bool) -> pytest.Item:
    """A stand-in for a collected test: its node id and whether it is marked ``waits``."""
    marker = object() if waits else None
    return SimpleNamespace(nodeid=name, get_closest_marker=lambda name: marker if name == "waits" else None)  # type: ignore[return-value]


def test_the_first_batches_are_what_worksteal_hands_out() -> None:
    assert first_batches(2229, 4) == [557, 557, 557, 558]
    assert first_batches(10, 3) == [3, 3, 4]
    assert sum(first_batches(1001, 7)) == 1001


@pytest.mark.parametrize("workers", [2, 4])
def test_each_batch_holds_its_share_of_the_waiting_tests_early(workers: int) -> None:
    items = [item(f"t{i}", waits=i >= 1960) for i in range(2000)]  # the 40 waiting ones last
    order = spread_waiting(items, workers)
    assert sorted(i.nodeid for i in order) == sorted(i.nodeid for i in items)
    start = 0
    for size in first_batches(len(order), workers):
        batch = order[start : start + size]
        start += size
        at = [k for k, i in enumerate(batch) if i.get_closest_marker("waits")]
        assert len(at) == 40 // workers
        assert 0.1 * size <= at[0] and at[-1] <= 0.65 * size, (at, size)
        assert all(b - a > 5 for a, b in itertools.pairwise(at))  # spread, not in a row
