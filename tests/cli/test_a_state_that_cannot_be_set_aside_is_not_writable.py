"""The saved state of another release that cannot be moved aside (``state_report.set_aside``):
an environment error with the ``not-writable`` code, naming the folder and the OS's reason."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from sm120patch.errors import EnvironmentProblem, ExitCode
from sm120patch.patcher.commands import state_report
from sm120patch.patcher.transaction.state_dir import StateDir


def test_a_set_aside_refused_by_the_os_is_not_writable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def read_only_set_aside(self: StateDir, label: str) -> Path:
        """Fake: the state folder is read-only."""
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(StateDir, "set_aside", read_only_set_aside)
    state = StateDir(tmp_path)
    with pytest.raises(EnvironmentProblem) as raised:
        state_report.set_aside(state, "0.5.10")
    assert (raised.value.exit_code, raised.value.code) == (ExitCode.ENVIRONMENT, "not-writable")
    assert f"sglang 0.5.10 aside in {state.root} (Permission denied: {state.root})" in str(raised.value)
