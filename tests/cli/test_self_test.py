"""``sm120patch self-test``: every patch's examples against the installed libcst, no sglang read."""

from __future__ import annotations

import json

import libcst as cst
import pytest
from click.testing import CliRunner

from sm120patch.cli import main
from sm120patch.patcher.commands import self_test as module
from sm120patch.patcher.kit.model import Example, State
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
