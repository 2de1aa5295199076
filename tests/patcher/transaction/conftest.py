"""What the tests of the transaction share."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120patch.patcher.transaction.state_dir import StateDir


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    """The state of an installed sglang package dir that has none yet."""
    package = tmp_path / "site" / "sglang"
    package.mkdir(parents=True)
    return StateDir(package)
