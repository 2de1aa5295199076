"""A journal that is not one this tool wrote (an unknown op, a field missing, an entry with a
field no journal has) is an environment error with the code ``state-damaged``, as a damaged
manifest is: scripts match the code (errors.CODES)."""

from __future__ import annotations

from typing import Any

import pytest

from sm120patch.errors import EnvironmentProblem, ExitCode
from sm120patch.patcher.transaction.journal import Journal
from tests.patcher.transaction.test_saved_state import OLD_JOURNAL


@pytest.mark.parametrize(
    "damage",
    [
        {"op": "upgrade"},
        {"entries": [{**OLD_JOURNAL["entries"][0], "size": 1}]},
        {"format": None, "entries": None},
    ],
    ids=["unknown-op", "unknown-entry-field", "no-entries"],
)
def test_a_damaged_journal_is_exit_2_state_damaged(damage: dict[str, Any]) -> None:
    data = {k: v for k, v in {**OLD_JOURNAL, **damage}.items() if v is not None}
    with pytest.raises(EnvironmentProblem) as raised:
        Journal.from_json(data)
    assert (raised.value.exit_code, raised.value.code) == (ExitCode.ENVIRONMENT, "state-damaged")
