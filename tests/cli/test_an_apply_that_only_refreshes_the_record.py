"""An apply with nothing to write in sglang's files that only brings the saved record up to date
(commands/apply.py ``_refresh_record``): a record that cannot be saved is ``not-writable``, as
every write this tool cannot make; an auto-enable TP the record already holds, asked again or
not asked, leaves the manifest and the sweep record as they were (an ask parses the tree
again: what it finds is the record's, so nothing is written)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from sm120patch.patcher.commands import apply as apply_module
from tests.cli.test_an_apply_with_nothing_to_write import state_files
from tests.cli.test_verify_and_apply_verdicts import applied, edit_manifest
from tests.support.cli import jrun


def test_a_record_that_cannot_be_saved_is_not_writable_and_left_as_it_was(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = applied(mini)
    edit_manifest(manifest, fingerprint="0" * 64)  # stale: as a newer sm120patch's code would see it
    before = manifest.read_bytes()

    def denied(self: object, saved: object) -> None:
        """Fake: the state folder takes no new file."""
        raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(manifest))

    monkeypatch.setattr(apply_module.StateDir, "save", denied)
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert (code, data["code"]) == (2, "not-writable")
    assert str(manifest) in data["error"] and manifest.read_bytes() == before


@pytest.mark.parametrize("asked", [[], ["--auto-enable-tp", "any"]], ids=["not-asked", "asked-again"])
def test_a_recorded_auto_enable_tp_leaves_the_manifest_as_it_was(mini: Path, asked: list[str]) -> None:
    assert jrun("apply", "--sglang-path", str(mini), "--auto-enable-tp", "any")[0] == 0
    before = state_files(mini)  # inode, mtime and bytes of each: a rewrite shows
    code, data = jrun("apply", "--sglang-path", str(mini), *asked)
    assert (code, data["written"]) == (0, [])
    assert state_files(mini) == before
