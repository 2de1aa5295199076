"""Which process's first logits a run keeps (the lowest whole-number rank, the first seen of
equal ranks, a rank that is not a whole number never recorded), and the forwards a process
that wrote no count adds (none)."""

from __future__ import annotations

from typing import Any

import pytest

from sm120patch.bench.server.counter import Logits


def first(tag: str) -> dict[str, Any]:
    """A process's first extend, told apart by ``tag``."""
    return {"extend": {"head": [1.0], "input_ids": [tag]}}


def kept(*processes: tuple[Any, str]) -> tuple[str, int | None]:
    """The tag and rank of the first logits a run keeps after ``processes`` (rank, tag) in order."""
    logits = Logits()
    for rank, tag in processes:
        logits.add({"first": first(tag)}, rank)
    return logits.first["extend"]["input_ids"][0], logits.rank


@pytest.mark.parametrize(
    ("processes", "expected"),
    [
        (((1, "a"), (0, "b")), ("b", 0)),  # a lower rank replaces
        (((0, "a"), (1, "b")), ("a", 0)),  # a higher rank does not
        (((0, "a"), (0, "b")), ("a", 0)),  # of equal ranks, the first seen stays
        (((None, "a"), (1, "b")), ("b", 1)),  # a known rank replaces an unknown one
        (((1, "a"), (None, "b")), ("a", 1)),  # an unknown rank replaces nothing
    ],
)
def test_the_lowest_rank_keeps_its_first_logits(
    processes: tuple[tuple[Any, str], ...], expected: tuple[str, int | None]
) -> None:
    assert kept(*processes) == expected


@pytest.mark.parametrize("rank", ["0", True, 0.0])
def test_a_rank_that_is_not_a_whole_number_is_not_recorded(rank: Any) -> None:
    assert kept((rank, "a")) == ("a", None)


def test_counts_a_process_did_not_write_add_nothing() -> None:
    logits = Logits()
    logits.add({"nonfinite": 2}, 0)
    logits.add({"forwards": 3}, 1)
    assert (logits.forwards, logits.nonfinite) == (3, 2)
