"""``output.words``: a count and its noun agree."""

from __future__ import annotations

import pytest

from sm120patch.output.words import counted


@pytest.mark.parametrize(
    ("count", "said"),
    [(0, "0 warnings"), (1, "1 warning"), (2, "2 warnings"), (12, "12 warnings")],
)
def test_one_is_singular_every_other_count_plural(count: int, said: str) -> None:
    assert counted(count, "warning") == said
