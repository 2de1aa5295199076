"""The fault-injection suite (tests/support/faultsuite.py) on a real release: zero files lost."""

from __future__ import annotations

import pytest

from tests.support.faultsuite import run_suite

pytestmark = pytest.mark.slow  # real sglang releases from the package index


@pytest.mark.parametrize("op", ["apply", "revert"])
def test_every_kill_and_io_fault_point_recovers(op: str) -> None:
    stats = run_suite("0.5.9", op)
    assert stats.failures == []
    assert stats.lost_or_half_written == 0 and stats.leftover_temp_files == 0
    # apply: 9 atomic writes (2 backups, 2 staged, journal, 2 targets, manifest, the sweep's
    # record) x 3 steps, plus journal, 2 replaces and finalize; revert: journal and 2 targets
    # x 3, plus 4.
    assert stats.kill_points == (31 if op == "apply" else 13)
    # An I/O error writing the sweep's record is no failure (best effort: verify then sweeps
    # the package), so its 3 points end the apply with 0, not with an error.
    assert stats.io_faults == 2 * (stats.kill_points - (3 if op == "apply" else 0))
    assert stats.recovered == stats.kill_points + stats.io_faults
