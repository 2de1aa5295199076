"""verify of a patched file someone edited since apply: the patches are in place, but revert
will refuse it; verify says so beforehand ([revert-refuses]) with revert's own way forward,
which works as printed.  A second revert, with nothing to restore, says that briefly."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_an_apply_with_nothing_to_write import of_another_release
from tests.support.cli import jrun, run
from tests.support.fakes import fake_flashinfer
from tests.support.mini_sglang import COMM, SERVER_ARGS

WARNING = (
    "[revert-refuses] changed since apply (hash differs from the patched one): sglang/{files}; "
    "`sm120patch revert` will refuse to restore {it}, "
    "`sm120patch revert --force` restores the originals anyway (the changed files are kept aside)"
)


def hand_edited(mini: Path, *rels: str) -> Path:
    fake_flashinfer(mini.parent, "0.6.18", [9, 10, 12])  # no warning about the fused path
    assert jrun("apply", "--sglang-path", str(mini))[0] == 0
    for rel in rels:
        with open(mini / rel, "a") as fh:
            fh.write("# tuned by hand\n")
    return mini


def test_verify_warns_that_revert_will_refuse_and_revert_force_works_as_printed(mini: Path) -> None:
    hand_edited(mini, COMM)
    code, data = jrun("verify", "--sglang-path", str(mini))
    assert (code, data["headline"]) == (0, "all patches applied")
    assert data["warnings"] == [WARNING.format(files=COMM, it="it")]
    # Not about the fused path: --strict does not refuse on it.
    assert jrun("verify", "--strict", "--sglang-path", str(mini))[0] == 0
    code, _, err = run("verify", "--sglang-path", str(mini))
    assert code == 0 and "warning: [revert-refuses] changed since apply" in " ".join(err.split())
    assert jrun("revert", "--sglang-path", str(mini))[0] == 1  # as warned
    code, data = jrun("revert", "--force", "--sglang-path", str(mini))
    assert code == 0 and data["headline"].startswith("restored 3 files byte for byte")


def test_every_changed_file_is_named_once(mini: Path) -> None:
    hand_edited(mini, COMM, SERVER_ARGS)
    code, data = jrun("verify", "--sglang-path", str(mini))
    files = f"{COMM}, sglang/{SERVER_ARGS}"
    assert code == 0 and data["warnings"] == [WARNING.format(files=files, it="them")]


def test_a_tree_as_apply_left_it_has_no_such_warning(mini: Path) -> None:
    hand_edited(mini)
    code, data = jrun("verify", "--sglang-path", str(mini))
    assert code == 0 and data["warnings"] == []


def test_a_second_revert_says_briefly_there_is_nothing_to_restore(mini: Path) -> None:
    assert jrun("apply", "--sglang-path", str(mini))[0] == 0
    assert jrun("revert", "--sglang-path", str(mini))[0] == 0
    code, _, err = run("revert", "--sglang-path", str(mini))
    assert code == 0 and err.rstrip().endswith("nothing to revert: no saved state, files as released")
    assert "pending" not in err and "communicator-fusion-gate" not in err  # no list of patches to apply
    code, data = jrun("revert", "--sglang-path", str(mini))  # --json keeps every patch's state
    assert code == 0 and {p["state"] for p in data["patches"]} >= {"pending"}


def test_the_state_of_another_release_has_no_such_warning(mini: Path) -> None:
    """Not this tree's state (``same_tree``), though no file holds what its apply wrote: apply
    sets it aside, revert never restores from it, so it has nothing to refuse."""
    of_another_release(mini)
    code, data = jrun("verify", "--sglang-path", str(mini))
    assert (code, data["state"]["stale"]) == (0, True)
    assert not [w for w in data["warnings"] if w.startswith("[revert-refuses]")]
