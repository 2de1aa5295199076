"""revert where no saved state is left and the files hold sm120patch's patches that no RECORD
can vouch for (a git checkout): refused as ``no-backup``, nothing written, and the folder
where no state was found is named, so that a state moved elsewhere can be put back there."""

from __future__ import annotations

import shutil
from pathlib import Path

from sm120patch.errors import ExitCode
from sm120patch.patcher.commands.revert import revert
from sm120patch.sglang.tree import from_directory
from tests.cli.test_revert import applied, checkout, contents


def test_the_refusal_names_the_folder_no_state_was_found_in(tmp_path: Path) -> None:
    package = checkout(tmp_path)
    patched = applied(package)
    shutil.rmtree(package / ".sm120patch")
    outcome = revert(from_directory(package))
    assert (outcome.exit_code, outcome.code, outcome.written) == (ExitCode.NOT_AS_ASKED, "no-backup", [])
    assert outcome.headline.startswith(f"no saved state in {package / '.sm120patch'}, but ")
    assert contents(package) == patched
