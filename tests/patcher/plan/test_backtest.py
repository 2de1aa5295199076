"""The backtest over sglang's history (tests/support/backtest.py): every move of a target,
run with the knowledge of the release before it, is found by role and patched byte for byte
as the tool of today patches it; a new obstacle no role could foresee is what the page says."""

from __future__ import annotations

import pytest

from tests.support.backtest import backtest, moves

#: The obstacles that appeared in a release (no row of their patch before it).
NEW_OBSTACLES = {"0.5.11": "workspace-preflight", "0.5.14": "fusion-backend-resolver"}


@pytest.mark.slow  # real sglang releases from the package index
@pytest.mark.parametrize(("version", "before"), moves())
def test_each_move_is_patched_by_role_as_today(version: str, before: str) -> None:
    result = backtest(version, before)
    assert result["exit_code"] == 0, result["headline_then"]
    if version in NEW_OBSTACLES:
        assert NEW_OBSTACLES[version] in result["new_obstacles"]
        assert result["written"] != result["written_today"] or not result["same_bytes"]
        unknown = [w for w in result["warnings_then"] if "an SM check this tool does not know" in w]
        # The resolver is an SM check on the fused path; the preflight is a multicast query.
        assert bool(unknown) is (version == "0.5.14"), unknown
        return
    assert result["same_bytes"]
    assert result["written"] == result["written_today"]


def test_the_moves_are_the_releases_where_a_row_begins() -> None:
    """The backtest reads the releases from the patches' rows: the moves sglang made are there."""
    versions = [v for v, _ in moves()]
    assert {"0.5.8", "0.5.15", "0.5.21", "0.5.22"} <= set(versions)
    assert set(NEW_OBSTACLES) <= set(versions)
    assert all(before != version for version, before in moves())
