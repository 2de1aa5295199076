"""``token_limit`` in the JSON of each command (docs/reference.md: apply and verify give it,
the others null), and what verify gives once the limit in the files can no longer be read
(the miniature release with sglang's token limit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_fuse_up_to import LIMITED
from tests.support.cli import jrun
from tests.support.mini_sglang import COMM, FILES, write_mini_sglang


@pytest.fixture
def package(tmp_path: Path) -> Path:
    return write_mini_sglang(tmp_path / "site", files={**FILES, COMM: LIMITED})


def test_revert_and_list_give_no_limit_object(package: Path) -> None:
    """The limit belongs to apply's and verify's report; revert and list say null even on a
    release with the limit, before and after a lowering."""
    assert jrun("list", "--sglang-path", str(package))[1]["token_limit"] is None
    assert jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "512")[0] == 0
    assert jrun("list", "--sglang-path", str(package))[1]["token_limit"] is None
    code, out = jrun("revert", "--sglang-path", str(package))
    assert code == 0 and out["token_limit"] is None


def test_verify_still_gives_sglangs_limit_and_the_ask_when_the_files_no_longer_give_one(package: Path) -> None:
    """A hand edit that assigns the constant a second time leaves no one limit in force (null),
    but sglang's own (read from the backup) and what the apply was asked for stay known."""
    assert jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "512")[0] == 0
    gate = package / COMM
    gate.write_text(gate.read_text() + "\nFUSE_ALLREDUCE_MAX_BATCH_SIZE = 4096\n")  # the hand edit
    limit = jrun("verify", "--sglang-path", str(package))[1]["token_limit"]
    assert (limit["in_force"], limit["sglang"]) == (None, 2048)
    assert (limit["asked"]["limit"], limit["asked"]["source"]) == (512, "given")
