"""``sm120patch revert`` with no saved state, on a wheel whose RECORD lists the package but not
the files sm120patch patches: it cannot vouch for them, and says that is why."""

from __future__ import annotations

from pathlib import Path

from sm120patch.errors import ExitCode
from sm120patch.patcher.commands.revert import revert
from sm120patch.sglang.tree import from_directory
from tests.support.mini_sglang import COMM, FUSION, SERVER_ARGS


def test_without_state_files_record_does_not_list_cannot_be_told_as_released(mini: Path) -> None:
    [record] = mini.parent.glob("sglang-*.dist-info/RECORD")
    rows = record.read_text().splitlines()
    record.write_text(
        "\n".join(r for r in rows if r.split(",")[0] not in {f"sglang/{rel}" for rel in (COMM, FUSION, SERVER_ARGS)})
        + "\n"
    )
    outcome = revert(from_directory(mini))
    assert (outcome.exit_code, outcome.code, outcome.written) == (ExitCode.OK, None, [])
    assert outcome.headline.endswith("whether they are as released cannot be told (no RECORD entry)")
    assert not (mini / ".sm120patch").exists()
