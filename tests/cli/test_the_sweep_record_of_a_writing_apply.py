"""The sweep record an apply that writes makes beside the manifest (``sweep.json``: the SM
checks no patch owns, so that verify need not read the package again) is best effort: a
disk too full for it leaves the patched files and the state as written, and verify sweeps
the package instead.  (An apply with nothing to write: test_an_apply_with_nothing_to_write.py.)

Fake: an OSError at the write of the sweep record (``tests/support/oserrors.py``)."""

from __future__ import annotations

import errno
from pathlib import Path

from sm120patch.patcher.transaction.state_dir import StateDir
from tests.cli.test_unknown_sm_checks import NEW_MODULE, NEW_SOURCE, NEW_WARNING
from tests.support import oserrors
from tests.support.cli import jrun
from tests.support.mini_sglang import COMM, FILES


def test_a_sweep_record_that_cannot_be_written_does_not_fail_the_apply_that_wrote_the_patches(
    mini: Path, tmp_path: Path
) -> None:
    (mini / NEW_MODULE).parent.mkdir(parents=True)
    (mini / NEW_MODULE).write_text(NEW_SOURCE)  # a gate no patch owns: the sweep has something to record
    temp = oserrors.Point("open", "site/sglang/.sm120patch/.sweep.json.*.sm120patch-tmp", 1)
    with oserrors.fail(tmp_path, temp, errno.ENOSPC) as armed:  # a full disk
        code, data = jrun("apply", "--sglang-path", str(mini))
    assert armed.fired == temp
    assert code == 0 and f"sglang/{COMM}" in data["written"] and (mini / COMM).read_text() != FILES[COMM]
    assert StateDir(mini).load() is not None and not StateDir(mini).sweep_path.exists()
    code, data = jrun("verify", "--sglang-path", str(mini))  # without the record: swept again
    assert code == 0 and NEW_WARNING in data["warnings"]
