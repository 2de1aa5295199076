"""A fusion gate renamed by a release the tool does not know, on the miniature release: found
by role, widened as a known row would widen it, said so (text, in yellow on a terminal, and
JSON), verified and reverted; ``--known-layouts-only`` refuses it.  Real releases reshaped the
same way: tests/patcher/plan/test_next_release.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import jrun, run
from tests.support.mini_sglang import COMM, FILES, write_mini_sglang

GATE = "use_flashinfer_allreduce_fusion"
FOUND = f"found by role in sglang/{COMM}:{GATE}, not a known layout"


@pytest.fixture
def renamed(tmp_path: Path) -> Path:
    comm = (
        FILES[COMM]
        .replace(
            "def apply_flashinfer_allreduce_fusion(batch_size: int):",
            f"FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048\n\n\ndef {GATE}(batch_size: int):",
        )
        .replace("and batch_size > 0", "and batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE")
    )
    return write_mini_sglang(tmp_path / "site", files={**FILES, COMM: comm})


def test_a_renamed_gate_is_found_by_role_widened_verified_and_reverted(renamed: Path) -> None:
    where = ("--sglang-path", str(renamed))
    original = (renamed / COMM).read_bytes()
    code, _, err = run("apply", *where)
    assert code == 0, err
    assert f"    {FOUND}" in err.splitlines()
    assert "(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)" in (renamed / COMM).read_text()
    code, data = jrun("verify", *where)
    gate = next(p for p in data["patches"] if p["id"] == "communicator-fusion-gate")
    assert (code, data["code"], gate["state"], gate["found_by"]) == (0, None, "applied", "role")
    assert gate["found_at"] == f"sglang/{COMM}:{GATE}"
    assert all(p["found_by"] == "anchor" for p in data["patches"] if p["id"] != "communicator-fusion-gate")
    code, data = jrun("verify", "--known-layouts-only", *where)
    assert (code, data["code"]) == (1, "drift")
    code, data = jrun("revert", *where)
    assert (code, data["code"]) == (0, None) and (renamed / COMM).read_bytes() == original


def test_in_colour_the_role_find_is_yellow(renamed: Path) -> None:
    code, _, err = run(
        "apply", "--dry-run", "--sglang-path", str(renamed),
        env={"FORCE_COLOR": "1", "NO_COLOR": None, "TERM": "xterm", "COLUMNS": "200"},
    )  # fmt: skip
    assert code == 0, err
    assert f"    \x1b[33m{FOUND}\x1b[0m" in err.splitlines()
