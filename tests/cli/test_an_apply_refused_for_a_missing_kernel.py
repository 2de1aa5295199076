"""An apply refused because the FlashInfer beside sglang has no SM12x kernel: nothing is
written, and the report is of the files as they are (the SM checks where they stand now), with
the limit asked by ``--fuse-up-to``; a folder that links out of the package does not turn the
refusal into another error."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.cli.test_fuse_up_to import LIMITED
from tests.cli.test_unknown_sm_checks import COMM_WARNING, NEW_MODULE, NEW_SOURCE, NEW_WARNING, OUTSIDE_ANCHOR
from tests.support.cli import jrun, tree_hashes
from tests.support.fakes import fake_flashinfer
from tests.support.mini_sglang import COMM, FILES, SERVER_ARGS, write_mini_sglang

REFUSED = "refusing to patch, nothing was written: FlashInfer 0.6.16 has no SM12x allreduce kernel ("


def without_kernel(package: Path) -> Path:
    """``package`` with a fake FlashInfer 0.6.16 beside it, built for SM 9 and 10 only."""
    fake_flashinfer(package.parent, "0.6.16", [9, 10])
    return package


def test_the_refusal_reports_the_unknown_sm_checks_where_they_are_now(mini: Path) -> None:
    """The gate in the patched file stands on line 20 now; the import the refused change would
    have added above it (line 22 after an apply) is not there."""
    without_kernel(mini)
    (mini / NEW_MODULE).parent.mkdir(parents=True)
    (mini / NEW_MODULE).write_text(NEW_SOURCE)
    with open(mini / COMM, "a") as fh:
        fh.write(OUTSIDE_ANCHOR)
    before = tree_hashes(mini)
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert code == 1 and data["written"] == [] and data["headline"].startswith(REFUSED)
    assert [w for w in data["warnings"] if "SM check" in w] == [COMM_WARNING, NEW_WARNING]
    assert [c["line"] for c in data["sm_checks"]] == [20, 6]
    assert tree_hashes(mini) == before


def test_the_refusal_shows_the_limit_asked(tmp_path: Path) -> None:
    """``--fuse-up-to 512`` refused: the limit patch says it would set 512, not sglang's own."""
    package = without_kernel(write_mini_sglang(tmp_path / "site", files={**FILES, COMM: LIMITED}))
    before = tree_hashes(package)
    code, data = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "512")
    assert code == 1 and data["written"] == [] and data["headline"].startswith(REFUSED)
    report = {r["id"]: r for r in data["patches"]}["fusion-token-limit"]
    assert (report["state"], report["detail"]) == (
        "pending",
        "will set the fusion token limit to 512 (now FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048)",
    )
    assert tree_hashes(package) == before


def test_the_refusal_stands_when_a_folder_links_out_of_the_package(tmp_path: Path) -> None:
    """The kernel refusal comes first: the folder linked into a store (which a real write would
    refuse) is never looked at, and the answer is the refusal, exit code 1."""
    store = write_mini_sglang(tmp_path / "cache" / "archive-v0" / "abc123")  # an installer's cache
    package = without_kernel(write_mini_sglang(tmp_path / "a"))
    shutil.rmtree(package / "srt" / "layers")
    (package / "srt" / "layers").symlink_to(store / "srt" / "layers")
    before = tree_hashes(tmp_path)
    code, data = jrun("apply", "--sglang-path", str(package))
    assert code == 1 and data["written"] == [] and data["headline"].startswith(REFUSED)
    assert tree_hashes(tmp_path) == before


def test_the_refusal_shows_the_auto_enable_form_asked(tmp_path: Path) -> None:
    """The auto-enable widened at TP 2 (as apply writes it by default), then ``--auto-enable-tp
    any`` refused: the auto-enable reads as pending the form asked, not as applied in the form
    it has."""
    at_tp2 = (
        FILES[SERVER_ARGS]
        .replace("is_sm100_supported\n", "is_sm100_supported, is_sm120_supported\n")
        .replace("or is_sm100_supported())", "or is_sm100_supported() or (is_sm120_supported() and self.tp_size == 2))")
    )
    package = without_kernel(write_mini_sglang(tmp_path / "site", files={**FILES, SERVER_ARGS: at_tp2}))
    before = tree_hashes(package)
    code, data = jrun("apply", "--sglang-path", str(package), "--auto-enable-tp", "any")
    assert (code, data["code"], data["written"]) == (1, "missing-kernel", [])
    report = {r["id"]: r for r in data["patches"]}["server-args-auto-enable"]
    assert report["state"] == "pending" and "auto-enable at any TP: will drop the TP conjunct" in report["detail"]
    assert tree_hashes(package) == before
