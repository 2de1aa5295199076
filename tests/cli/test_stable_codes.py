"""Stable codes in the text and in --json: scripts match the code, not the sentence."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import jrun, run
from tests.support.mini_sglang import FILES, write_mini_sglang


def test_an_error_has_its_code_in_the_json_and_before_its_sentence(tmp_path: Path) -> None:
    code, data = jrun("verify", "--sglang-path", str(tmp_path / "nowhere"))
    assert (code, data["code"], data["ok"]) == (2, "no-sglang", False)
    code, _, err = run("verify", "--sglang-path", str(tmp_path / "nowhere"))
    assert code == 2 and err.startswith("error: [no-sglang] --sglang-path ")


def test_an_outcome_not_as_asked_has_its_code_and_one_as_asked_has_none(tmp_path: Path) -> None:
    package = write_mini_sglang(tmp_path / "site")
    code, before = jrun("verify", "--sglang-path", str(package))
    assert (code, before["code"]) == (1, "pending")
    code, _, err = run("verify", "--sglang-path", str(package))
    assert code == 1 and err.rstrip().splitlines()[-1].startswith("[pending] not patched")
    assert jrun("apply", "--sglang-path", str(package))[1]["code"] is None
    renamed = FILES["srt/layers/communicator.py"].replace("def apply_flashinfer_allreduce_fusion(", "def gone(")
    other = write_mini_sglang(tmp_path / "other", files={**FILES, "srt/layers/communicator.py": renamed})
    code, data = jrun("apply", "--sglang-path", str(other))
    assert (code, data["code"]) == (1, "drift")
