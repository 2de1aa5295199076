"""``sm120patch self-test``: every patch's examples against the installed libcst, no sglang read."""

from __future__ import annotations

import io
import json
from importlib import metadata
from types import SimpleNamespace

import libcst as cst
import pytest
from click.testing import CliRunner

from sm120patch.cli import main
from sm120patch.patcher.commands import self_test as module
from sm120patch.patcher.kit.model import Example, Finding, State
from sm120patch.patcher.plan.registry import all_patches, by_id


def test_every_example_passes_here_and_the_json_counts_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SM120PATCH_SGLANG_PATH", raising=False)
    result = CliRunner().invoke(main, ["self-test", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ok"] is True and data["failures"] == []
    assert data["examples"] == sum(len(p.examples) for p in all_patches())
    assert data["patches"] == {p.id: len(p.examples) for p in all_patches()}


def test_an_example_a_libcst_breaks_is_named_with_why_and_exit_1(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake: a libcst whose printed code differs (``Module.code`` with a trailing space)."""
    real = cst.Module.code

    def code_with_a_space(self: cst.Module) -> str:
        return real.fget(self) + " "  # type: ignore[attr-defined]

    monkeypatch.setattr(cst.Module, "code", property(code_with_a_space))
    outcome = module.self_test()
    assert outcome.exit_code == 1
    pending = {(p.id, e.name) for p in all_patches() for e in p.examples if e.state is State.PENDING}
    assert {(p, e) for p, e, _ in outcome.failures} == pending
    assert {why for _, _, why in outcome.failures} == {"writes other code than the example's `after`"}


def test_a_wrong_state_is_said_with_what_the_patch_found() -> None:
    patch = by_id()["communicator-fusion-gate"]
    example = Example(
        "claims applied", "def apply_flashinfer_allreduce_fusion(b):\n    return b > 0\n", state=State.APPLIED
    )
    why = module.run_example(patch, example)
    assert why is not None and why.startswith("gives drift, expected applied: ")


def test_a_pending_finding_without_a_change_is_named() -> None:
    """Fake: the gate patch's ``check`` replaced by one that finds work but carries no change."""
    patch = by_id()["communicator-fusion-gate"]
    example = next(e for e in patch.examples if e.state is State.PENDING)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(patch, "check", lambda module, ctx: Finding(State.PENDING, example.detail or "found work"))
        assert module.run_example(patch, example) == "pending with no change to make"


def test_a_change_that_does_not_compile_is_named() -> None:
    """Fake: a ``check`` whose change writes the example's ``after``, which is not Python."""
    patch = by_id()["communicator-fusion-gate"]
    broken = Example("broken after", "x = 1\n", after="def (:\n")

    def writes_the_after(module: cst.Module, ctx: object) -> Finding:
        return Finding(State.PENDING, "found work", apply=lambda m: SimpleNamespace(code=broken.after))  # type: ignore[arg-type,return-value]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(patch, "check", writes_the_after)
        why = module.run_example(patch, broken)
    assert why is not None and why.startswith("writes code that does not compile (")


def test_an_example_that_raises_is_a_failure_that_names_the_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    def raises(patch: object, example: object) -> str | None:
        raise ValueError("libcst broke")

    monkeypatch.setattr(module, "run_example", raises)
    outcome = module.self_test()
    assert outcome.libcst == metadata.version("libcst")
    assert len(outcome.failures) == sum(len(p.examples) for p in all_patches())
    assert {why for _, _, why in outcome.failures} == {"raised ValueError: libcst broke"}


def test_the_json_names_the_command_its_libcst_and_each_failure() -> None:
    result = module.SelfTest("1.2.3", {"a": 3, "b": 2}, [("b", "ex1", "why1")])
    assert result.to_json() == {
        "command": "self-test",
        "ok": False,
        "exit_code": 1,
        "libcst": "1.2.3",
        "examples": 5,
        "patches": {"a": 3, "b": 2},
        "failures": [{"patch": "b", "example": "ex1", "why": "why1"}],
    }
    assert module.SelfTest("1.2.3", {"a": 3}).to_json()["exit_code"] == 0


@pytest.mark.parametrize("failing", [False, True], ids=["passes", "fails"])
def test_the_text_counts_each_patch_in_colour_and_lists_its_failures(
    monkeypatch: pytest.MonkeyPatch, failing: bool
) -> None:
    """Fake: the console, a recording 80-column terminal with colour."""
    from rich.console import Console

    from sm120patch.output import console as console_module

    shown = Console(record=True, force_terminal=True, color_system="standard", width=80, file=io.StringIO())
    monkeypatch.setattr(console_module, "console", lambda: shown)
    failures = [("b", "ex1", "why1")] if failing else []
    module.SelfTest("1.2.3", {"a": 3, "b": 2}, failures).render_text()
    text = shown.export_text(styles=True, clear=False)
    plain = [line.rstrip() for line in shown.export_text().splitlines()]
    assert "\x1b[32m3 of 3 examples pass" in text
    if failing:
        assert plain == [
            "a  3 of 3 examples pass",
            "b  1 of 2 examples pass",
            "    ex1: why1",
            "1 of 5 examples fail with libcst 1.2.3: do not apply with this libcst; install",
            "the one the failures do not show",
        ]
        assert "\x1b[31m1 of 2 examples pass" in text and "\x1b[1;31m1 of 5 examples fail" in text
    else:
        assert plain == [
            "a  3 of 3 examples pass",
            "b  2 of 2 examples pass",
            "every example of every patch passes with libcst 1.2.3 (5 examples)",
        ]
        assert "\x1b[1;32mevery example" in text
