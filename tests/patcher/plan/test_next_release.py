"""The next sglang release on day 0: real 0.5.23 with its targets moved, renamed or respelled
(``tests/support/next_release.py``), patched by role, verified, and reverted byte for byte;
sglang's own gate, wherever it went, then admits an SM12x GPU (named fakes)."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sm120patch.patcher.commands.apply import apply as apply_tree
from sm120patch.patcher.commands.revert import revert as revert_tree
from sm120patch.patcher.commands.verify import verify as verify_tree
from sm120patch.patcher.kit.model import FOUND_BY_ROLE, ROLE_FINDS, State
from sm120patch.patcher.patches.fusion_token_limit import LIMIT_NAME
from sm120patch.sglang.tree import from_directory
from tests.support.next_release import VARIANTS, Variant
from tests.support.realtrees import copy_release, sha256
from tests.support.sglang_exec import load_function

pytestmark = pytest.mark.slow  # a real sglang release from the package index


class FakePlatformSM120:
    """``get_platform()`` on an RTX PRO 6000: compute capability 12.0."""

    is_sm90, is_sm100, is_sm120, is_blackwell = False, False, True, True


def _fusion_on() -> dict[str, Any]:
    """What the gate reads besides the SM flags and the batch, with fusion asked for: named fakes."""
    comm = SimpleNamespace(flashinfer_allreduce_fusion_backend="trtllm")
    return {
        "_is_cuda": True,
        "_is_flashinfer_available": True,
        "get_platform": FakePlatformSM120,
        "get_exec": lambda: SimpleNamespace(comm=comm),
        "is_dp_attention_enabled": lambda: False,
        "uses_cutedsl_ar_fusion": lambda: False,
        "is_flashinfer_allreduce_unavailable": lambda: False,
    }


def _gate(package: Path, found_at: str, flags_at: str) -> Any:
    """sglang's gate at ``found_at`` (``file:function``), with the module-level SM flags and
    limit of its module and of ``flags_at`` executed as they are."""
    rel, name = found_at.split(":")
    namespace = _fusion_on()
    for module in dict.fromkeys((flags_at, rel)):
        source = (package / module).read_bytes()
        lines = [
            s
            for s in ast.parse(source).body
            if isinstance(s, ast.Assign)
            and all(isinstance(t, ast.Name) and (t.id.startswith("_is_sm") or t.id == LIMIT_NAME) for t in s.targets)
        ]
        exec(compile(ast.Module(lines, type_ignores=[]), module, "exec"), namespace)
    return load_function((package / rel).read_bytes(), name, namespace, rel)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_the_next_release_is_patched_by_role_and_reverted_byte_for_byte(variant: Variant, tmp_path: Path) -> None:
    package = copy_release("0.5.23", tmp_path / "site")
    variant.make(package)
    before = {p: sha256(p) for p in package.rglob("*.py")}
    tree = from_directory(package)

    applied = apply_tree(tree)
    assert applied.exit_code == 0, applied.headline
    checked = verify_tree(tree)
    assert checked.exit_code == 0, checked.headline
    assert checked.plan is not None
    reports = {r.id: r for r in checked.plan.reports}
    assert {pid for pid, r in reports.items() if r.found_by == FOUND_BY_ROLE} >= set(variant.moves)
    assert all(r.state in (State.APPLIED, State.NOT_NEEDED) for r in reports.values())
    assert not checked.warnings, checked.warnings  # no SM check left that no patch owns
    gate = reports["communicator-fusion-gate"]
    found_at = gate.found_at or f"{gate.file}:{gate.where}"
    flags = reports["communicator-flag"]
    run = _gate(package, found_at, flags.file)
    assert [bool(run(n)) for n in (1, 2048, 2049)] == [True, True, False]  # SM12x admitted, limit kept

    back = revert_tree(tree)
    assert back.exit_code == 0, back.headline
    assert {p: sha256(p) for p in package.rglob("*.py")} == before
    assert [bool(_gate(package, found_at, flags.file)(1))] == [False]  # as sglang ships it: SM12x shut out


def test_known_layouts_only_leaves_a_moved_gate_in_drift_and_writes_nothing(tmp_path: Path) -> None:
    package = copy_release("0.5.23", tmp_path / "site")
    VARIANTS[1].make(package)
    before = {p: sha256(p) for p in package.rglob("*.py")}
    token = ROLE_FINDS.set(False)
    try:
        outcome = apply_tree(from_directory(package))
    finally:
        ROLE_FINDS.reset(token)
    assert outcome.exit_code == 1
    assert outcome.plan is not None
    gate = {r.id: r for r in outcome.plan.reports}["communicator-fusion-gate"]
    assert gate.state is State.DRIFT and "which --known-layouts-only refuses" in gate.detail
    assert "fusion_gates.py:ar_norm_fusion_enabled" in gate.detail
    assert {p: sha256(p) for p in package.rglob("*.py")} == before


def test_known_layouts_only_refuses_a_role_find_a_trusted_tree_recorded(tmp_path: Path) -> None:
    """verify reads an applied tree's saved record without parsing it: the role find recorded
    there is refused all the same."""
    package = copy_release("0.5.23", tmp_path / "site")
    VARIANTS[0].make(package)
    tree = from_directory(package)
    assert apply_tree(tree).exit_code == 0
    assert verify_tree(tree).exit_code == 0
    token = ROLE_FINDS.set(False)
    try:
        refused = verify_tree(tree)
    finally:
        ROLE_FINDS.reset(token)
    assert refused.exit_code == 1
    assert refused.plan is not None
    gate = {r.id: r for r in refused.plan.reports}["communicator-fusion-gate"]
    assert gate.state is State.DRIFT and gate.detail.endswith("which --known-layouts-only refuses")
