"""apply judges the tree under a shared lock only where a lock file exists; where none does
yet, and a writer began meanwhile, it judges the tree again.  The package read beside the
first planning (the sweep's prefetch) is used once: the second judgement sweeps the package
as the writer left it, whether the first judgement planned the tree or trusted its record.

Fakes: the prefetch made to finish its reading before the planning starts (so that what it
read is known); "a writer" that, during the first judgement, makes the lock file and changes
the package, as an apply or revert in another process would."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sm120patch.patcher.commands import apply as apply_module
from sm120patch.patcher.transaction.state_dir import StateDir
from sm120patch.sglang.tree import SglangTree
from tests.cli.test_unknown_sm_checks import NEW_MODULE, NEW_SOURCE, NEW_WARNING
from tests.support.cli import jrun
from tests.support.mini_sglang import COMM


def prefetch_read_before_planning(monkeypatch: pytest.MonkeyPatch) -> None:
    """The prefetch's thread finishes before apply goes on (it may otherwise still be reading
    when the writer changes the package, and read the change itself)."""
    real = apply_module.prefetch

    def finished(tree: SglangTree) -> Any:
        started = real(tree)
        if started is not None:
            started.result()
        return started

    monkeypatch.setattr(apply_module, "prefetch", finished)


def writer_during_the_first(
    monkeypatch: pytest.MonkeyPatch, name: str, package: Path, change: Callable[[], None]
) -> None:
    """Wraps apply's ``name`` (a step of its judgement): on its first call "a writer" makes the
    lock file and runs ``change`` on the package."""
    real = getattr(apply_module, name)
    calls: list[int] = []

    def with_a_writer(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            state = StateDir(package)
            state.make()
            state.lock_path.write_text("")  # a writer makes it before it changes any file
            change()
        return result

    monkeypatch.setattr(apply_module, name, with_a_writer)


def judgements(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts apply's judgements of the tree (one entry each)."""
    real = apply_module._judge
    counted: list[int] = []

    def counting(*args: Any) -> Any:
        counted.append(1)
        return real(*args)

    monkeypatch.setattr(apply_module, "_judge", counting)
    return counted


def add_a_gate_no_patch_owns(package: Path) -> None:
    (package / NEW_MODULE).parent.mkdir(parents=True, exist_ok=True)
    (package / NEW_MODULE).write_text(NEW_SOURCE)


def applied_without_a_lock_file(mini: Path) -> StateDir:
    """An applied tree whose state folder has no lock file (copied without it, say)."""
    assert jrun("apply", "--sglang-path", str(mini))[0] == 0
    state = StateDir(mini)
    state.lock_path.unlink()
    return state


def test_a_first_apply_judged_again_reports_the_gate_a_writer_added(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefetch_read_before_planning(monkeypatch)
    judged = judgements(monkeypatch)
    writer_during_the_first(monkeypatch, "plan_tree", mini, lambda: add_a_gate_no_patch_owns(mini))
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert len(judged) == 2  # judged again, after the writer
    assert code == 0 and data["written"], data
    assert NEW_WARNING in data["warnings"]  # read after the writer, not before it


def test_a_trusted_tree_judged_again_reports_the_gate_a_writer_added(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first judgement trusts the record of the last apply; the writer adds a gate and
    edits a patched file (so the tree is checked by structure the second time)."""
    state = applied_without_a_lock_file(mini)
    state.sweep_path.unlink()  # no sweep record: the package is read beside the planning

    def change() -> None:
        add_a_gate_no_patch_owns(mini)
        with open(mini / COMM, "a") as fh:
            fh.write("\n# edited\n")

    prefetch_read_before_planning(monkeypatch)
    judged = judgements(monkeypatch)
    writer_during_the_first(monkeypatch, "trusted_plan", mini, change)
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert len(judged) == 2  # judged again, after the writer
    assert code == 0 and data["headline"] == "already applied: nothing to change", data
    assert NEW_WARNING in data["warnings"]


def test_a_trusted_tree_judged_again_and_still_trusted_is_already_applied(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer changes nothing apply reads: the second judgement trusts the record again,
    with the package read of the first one already used."""
    applied_without_a_lock_file(mini)
    judged = judgements(monkeypatch)
    writer_during_the_first(monkeypatch, "trusted_plan", mini, lambda: None)
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert len(judged) == 2  # judged again, after the writer
    assert code == 0 and data["headline"] == "already applied: nothing to change", data


def test_a_tree_another_apply_patched_meanwhile_is_judged_with_the_gate_added_before_it(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer is another apply, after a gate was added; its sweep record is lost (its
    write failed, say), so the second judgement trusts the tree and must sweep it itself."""

    def another_apply() -> None:
        add_a_gate_no_patch_owns(mini)
        assert jrun("apply", "--sglang-path", str(mini))[0] == 0
        StateDir(mini).sweep_path.unlink()

    prefetch_read_before_planning(monkeypatch)
    writer_during_the_first(monkeypatch, "plan_tree", mini, another_apply)
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert code == 0 and data["headline"] == "already applied: nothing to change", data
    assert NEW_WARNING in data["warnings"]
