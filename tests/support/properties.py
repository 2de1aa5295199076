"""Property tests that run some examples in the fast tier and all of them in the slow tier."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis.strategies import SearchStrategy


def fast_and_slow(
    check: Callable[..., None], *strategies: SearchStrategy[Any], fast: int, slow: int, **options: Any
) -> tuple[Callable[..., None], Callable[..., None]]:
    """``check`` over ``strategies`` as two tests: ``fast`` examples for the fast tier and a
    twin marked ``slow`` that runs ``slow`` of them.  Bind both to ``test_...`` names."""

    def runs(examples: int) -> Callable[..., None]:
        return settings(max_examples=examples, deadline=None, **options)(given(*strategies)(check))

    return runs(fast), pytest.mark.slow(runs(slow))
