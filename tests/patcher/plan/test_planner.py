"""The planner on the miniature release: a target file that is not there, a report's
summary and location, and what a plan with drift anywhere holds."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from sm120patch.errors import EnvironmentProblem, InternalError
from sm120patch.patcher.kit.model import Anchor, Finding, Patch, PatchContext, Releases, State
from sm120patch.patcher.plan.planner import make_plan
from sm120patch.patcher.plan.registry import all_patches, by_id
from sm120patch.sglang.layout import GATE, files_keeping, module_name
from sm120patch.sglang.tree import from_directory
from tests.support.mini_sglang import COMM, FILES, FUSION, write_mini_sglang

PREFLIGHT = "workspace-preflight"


def without(rel: str) -> dict[str, str]:
    return {name: text for name, text in FILES.items() if name != rel}


def test_a_target_file_that_is_not_there_is_drift_naming_it(tmp_path: Path) -> None:
    package = write_mini_sglang(tmp_path / "site", files=without(FUSION))
    plan = make_plan(from_directory(package), list(all_patches()), change=False)
    missing = {r.id: r for r in plan.reports if r.file == FUSION}
    assert missing["fusion-backend-resolver"].state is State.NOT_NEEDED  # 0.5.14+ only
    report = missing[PREFLIGHT]
    assert (report.state, report.state_after) == (State.DRIFT, State.DRIFT)
    assert report.detail == (
        f"none of {FUSION} exists in sglang 0.5.11; looked for by role: no function in the package is"
        " the workspace preflight (calls cuMulticastGetGranularity)"
    )
    assert report.found_by == "anchor"
    assert report.summary == by_id()[PREFLIGHT].summary and report.where == ""
    assert next(f for f in plan.files if f.rel == FUSION).original is None


def test_a_patch_that_follows_a_gate_not_found_is_drift_not_not_needed(tmp_path: Path) -> None:
    """The token limit follows the fusion gate: where the gate was renamed, "no limit in the
    gate" is unfounded, so the limit reads drift too, saying whose target it follows."""
    moved = FILES[COMM].replace("def apply_flashinfer_allreduce_fusion(", "def fusion_allowed(")
    package = write_mini_sglang(tmp_path / "site", files={**FILES, COMM: moved})
    plan = make_plan(from_directory(package), list(all_patches()), change=False)
    states = {r.id: r for r in plan.reports}
    assert states["communicator-fusion-gate"].state is State.DRIFT
    limit = states["fusion-token-limit"]
    assert (limit.state, limit.state_after) == (State.DRIFT, State.DRIFT)
    assert limit.detail.endswith(", but communicator-fusion-gate did not find the target this one follows")


def test_a_target_file_that_cannot_be_read_is_an_environment_problem_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fake: reading the fusion module's bytes fails with EACCES (a file root owns, say)."""
    package = write_mini_sglang(tmp_path / "site")
    real = Path.read_bytes

    def read_bytes(path: Path) -> bytes:
        if path == package / FUSION:
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    with pytest.raises(EnvironmentProblem) as raised:
        make_plan(from_directory(package), list(all_patches()), change=False)
    assert str(raised.value) == f"{package / FUSION}: cannot read (Permission denied)"
    assert raised.value.code == "unreadable"


def test_before_the_release_that_added_it_a_missing_file_is_not_needed(tmp_path: Path) -> None:
    package = write_mini_sglang(tmp_path / "site", version="0.5.10", files=without(FUSION))
    plan = make_plan(from_directory(package), [by_id()[PREFLIGHT]], change=True)
    (report,) = plan.reports
    assert (report.state, report.state_after) == (State.NOT_NEEDED, State.NOT_NEEDED)
    assert report.detail == f"nothing to change before sglang 0.5.11 (no {FUSION})"
    assert plan.changes == []


def test_every_report_carries_its_patchs_summary_and_where_it_looked(tmp_path: Path) -> None:
    package = write_mini_sglang(tmp_path / "site")
    plan = make_plan(from_directory(package), list(all_patches()), change=True)
    for report in plan.reports:
        assert report.summary == by_id()[report.id].summary, report.id
    where = {r.id: r.where for r in plan.reports}
    assert where["communicator-fusion-gate"] == "apply_flashinfer_allreduce_fusion"
    assert where["server-args-auto-enable"] == "ServerArgs._handle_model_specific_adjustments"
    assert where["communicator-import"] == ""  # module level
    gate = next(r for r in plan.reports if r.id == "communicator-fusion-gate")
    assert gate.file == COMM and gate.state is State.PENDING and gate.state_after is State.APPLIED


def test_a_file_that_does_not_parse_is_drift_for_each_of_its_patches(tmp_path: Path) -> None:
    files = dict(FILES)
    files[COMM] = files[COMM] + "\ndef broken(:\n"
    package = write_mini_sglang(tmp_path / "site", files=files)
    plan = make_plan(from_directory(package), list(all_patches()), change=True)
    broken = [r for r in plan.reports if r.file == COMM]
    assert [r.id for r in broken] == [
        "communicator-import",
        "communicator-flag",
        "communicator-fusion-gate",
        "fusion-token-limit",
    ]
    for report in broken:
        assert (report.state, report.state_after, report.where) == (State.DRIFT, State.DRIFT, "")
        assert report.detail.startswith(f"{COMM}:") and "does not parse" in report.detail
    assert plan.changes == []  # drift anywhere: nothing is planned to be written


class StandInPatch(Patch):
    """A patch for these tests only: ``check`` answers ``before`` on a file without the line
    ``added`` and ``after`` on one with it; applying it appends that line."""

    id = "stand-in"
    summary = "a patch of the planner tests"
    anchors = (Anchor(COMM, "anything", Releases("0.5.11")),)

    def __init__(self, before: Finding, after: Finding, added: str) -> None:
        self.before, self.after, self.added = before, after, added

    def check(self, module: cst.Module, ctx: PatchContext) -> Finding:
        if self.added in module.code:
            return self.after
        return Finding(self.before.state, self.before.detail, self.before.where, apply=self._apply)

    def _apply(self, module: cst.Module) -> cst.Module:
        return module.with_changes(body=[*module.body, cst.parse_statement(self.added)])


def test_a_change_that_does_not_check_as_applied_is_a_bug_and_nothing_is_planned(tmp_path: Path) -> None:
    package = write_mini_sglang(tmp_path / "site")
    patch = StandInPatch(Finding(State.PENDING, "will change"), Finding(State.DRIFT, "still not there"), "x = 1\n")
    with pytest.raises(InternalError) as raised:
        make_plan(from_directory(package), [patch], change=True)
    assert str(raised.value) == (
        f"{COMM}: stand-in did not re-check as applied (drift: still not there); nothing was written"
    )


def test_a_change_that_does_not_compile_is_a_bug_naming_the_file(tmp_path: Path) -> None:
    package = write_mini_sglang(tmp_path / "site")
    patch = StandInPatch(Finding(State.PENDING, "will change"), Finding(State.APPLIED, "changed"), "return 1\n")
    with pytest.raises(InternalError) as raised:
        make_plan(from_directory(package), [patch], change=True)
    message = str(raised.value)
    assert message.startswith(f"{COMM}: the patched code does not compile (")
    assert "'return' outside function (communicator.py, line " in message  # Python names the file
    assert message.endswith("); nothing was written")


@pytest.mark.parametrize(
    ("first", "final", "shown"),
    [("f", "", "f"), ("", "g", "g"), ("f", "g", "f")],
    ids=["before", "after", "before over after"],
)
def test_a_report_says_where_the_patch_looked_before_or_else_after(
    tmp_path: Path, first: str, final: str, shown: str
) -> None:
    package = write_mini_sglang(tmp_path / "site")
    patch = StandInPatch(
        Finding(State.PENDING, "will change", first), Finding(State.APPLIED, "changed", final), "y = 2\n"
    )
    (report,) = make_plan(from_directory(package), [patch], change=True).reports
    assert (report.where, report.state, report.state_after, report.detail) == (
        shown,
        State.PENDING,
        State.APPLIED,
        "changed",
    )


def test_a_refused_release_is_planned_as_nothing_but_keeps_its_tree(tmp_path: Path) -> None:
    files = dict(FILES)
    files["srt/utils/common.py"] = files["srt/utils/common.py"].replace("def is_sm120_supported", "def _gone")
    package = write_mini_sglang(tmp_path / "site", files=files)
    tree = from_directory(package)
    plan = make_plan(tree, list(all_patches()), change=True)
    assert plan.tree is tree and plan.files == [] and plan.refusal


#: The miniature release's communicator.py up to its gate: its imports and SM flags.
FLAGS = FILES[COMM].split("\n\n\ndef ")[0] + "\n"
RENAMED_GATE = (
    FLAGS + "\n\n"
    "def ar_fusion_enabled(batch_size: int):\n"
    "    return (\n"
    "        (_is_sm90_supported or _is_sm100_supported)\n"
    "        and get_global_server_args().enable_flashinfer_allreduce_fusion\n"
    "        and batch_size > 0\n"
    "    )\n"
)


def test_a_renamed_gate_is_found_by_role_and_planned_as_a_known_one(tmp_path: Path) -> None:
    package = write_mini_sglang(tmp_path / "site", files={**FILES, COMM: RENAMED_GATE})
    plan = make_plan(from_directory(package), list(all_patches()), change=True)
    gate = {r.id: r for r in plan.reports}["communicator-fusion-gate"]
    assert (gate.state, gate.state_after, gate.found_by) == (State.PENDING, State.APPLIED, "role")
    assert gate.found_at == f"{COMM}:ar_fusion_enabled" and gate.where == "ar_fusion_enabled"
    (changed,) = [f for f in plan.files if f.rel == COMM]
    assert changed.updated is not None
    assert b"(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)" in changed.updated
    others = [r for r in plan.reports if r.id != gate.id]
    assert all(r.found_by == "anchor" and not r.found_at for r in others)


def test_known_layouts_only_names_the_role_find_and_leaves_the_patch_in_drift(tmp_path: Path) -> None:
    package = write_mini_sglang(tmp_path / "site", files={**FILES, COMM: RENAMED_GATE})
    plan = make_plan(from_directory(package), list(all_patches()), change=True, roles=False)
    gate = {r.id: r for r in plan.reports}["communicator-fusion-gate"]
    assert (gate.state, gate.found_by) == (State.DRIFT, "anchor")
    assert gate.detail.endswith(
        f"; found by role in {COMM}:ar_fusion_enabled, not a known layout, which --known-layouts-only refuses"
    )
    assert plan.changes == []


def test_a_follower_of_a_gate_not_found_anywhere_is_not_called_not_needed(tmp_path: Path) -> None:
    """The gate and its flags gone from every module: "no cached flags here, the gate tests its
    terms inline" would be a claim about a gate nobody found."""
    gone = "from sglang.srt.utils import is_cuda\n\n_is_cuda = is_cuda()\n"
    package = write_mini_sglang(tmp_path / "site", files={**FILES, COMM: gone})
    plan = make_plan(from_directory(package), list(all_patches()), change=False)
    reports = {r.id: r for r in plan.reports}
    assert reports["communicator-fusion-gate"].state is State.DRIFT
    assert (
        "looked for by role: no function in the package is the fusion gate"
        in reports["communicator-fusion-gate"].detail
    )
    flag = reports["communicator-flag"]
    assert flag.state is State.DRIFT
    assert flag.detail.endswith("but communicator-fusion-gate did not find the target this one follows")
    imported = reports["communicator-import"]  # follows the flags, which follow the gate
    assert imported.state is State.DRIFT
    assert imported.detail.endswith("but communicator-flag did not find the target this one follows")


def test_a_patch_left_out_is_checked_on_its_file_as_the_plan_leaves_it(tmp_path: Path) -> None:
    """The gate left out, its import and flag applied above it: its clause is read two lines
    lower, as the sweep reads the file apply writes; nothing of it is written or recorded."""
    package = write_mini_sglang(tmp_path / "site")
    gate = by_id()["communicator-fusion-gate"]
    chosen = [p for p in all_patches() if p is not gate]
    plan = make_plan(from_directory(package), chosen, change=True, left_out=[gate])
    (left,) = plan.left_out
    assert (left.id, left.file, left.state, left.state_after) == (gate.id, COMM, State.SKIPPED, State.SKIPPED)
    assert [e.line for e in left.evidence] == [16]  # line 14 in the release
    assert left.detail.startswith("left out as asked (--only / --skip); the code: pending: ")
    assert gate.id not in {r.id for r in plan.reports} and plan.skipped == [left]
    assert "_is_sm120_supported)" not in next(f for f in plan.changes if f.rel == COMM).updated.decode()


MOVED_GATE = (
    FLAGS + "\nFUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048\n\n\n"
    "def ar_fusion_enabled(batch_size: int):\n"
    "    return (\n"
    "        (_is_sm90_supported or _is_sm100_supported)\n"
    "        and get_global_server_args().enable_flashinfer_allreduce_fusion\n"
    "        and batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE\n"
    "    )\n"
)


GATE_ALONE = (
    "from sglang.srt.layers.communicator import _is_sm90_supported, _is_sm100_supported\n\n\n"
    "def ar_fusion_enabled(batch_size: int):\n"
    "    return (\n"
    "        (_is_sm90_supported or _is_sm100_supported)\n"
    "        and get_global_server_args().enable_flashinfer_allreduce_fusion\n"
    "    )\n"
)


def test_a_gate_moved_without_its_flags_imports_the_new_flag_from_where_the_flags_stayed(tmp_path: Path) -> None:
    """The flags stay in communicator.py (patched there), the gate moved to a module that
    imports them: the gate names the SM120 flag the flag patch writes in the other module, and
    imports it from there beside the others (bound in this file, it would be a NameError)."""
    from sm120patch.patcher.commands.apply import apply as apply_tree

    moved = "srt/layers/fusion_gates.py"
    package = write_mini_sglang(tmp_path / "site", files={**FILES, COMM: FLAGS, moved: GATE_ALONE})
    outcome = apply_tree(from_directory(package))
    assert outcome.exit_code == 0, outcome.headline
    assert outcome.plan is not None
    found = {r.id: r.file for r in outcome.plan.reports}
    assert (found["communicator-flag"], found["communicator-fusion-gate"]) == (COMM, moved)
    assert "_is_sm120_supported = _is_cuda and is_sm120_supported()" in (package / COMM).read_text()
    gate = (package / moved).read_text()
    assert gate.startswith(
        "from sglang.srt.layers.communicator import _is_sm90_supported, _is_sm100_supported, _is_sm120_supported\n"
    )
    assert "(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)" in gate


def test_a_gate_whose_known_function_no_longer_tests_the_sm_clause_is_found_where_it_went(tmp_path: Path) -> None:
    """The release's row expects the gate in apply_flashinfer_allreduce_fusion; that function
    is still there but tests nothing of the SM, so the gate is looked for by role, and found in
    the module it went to."""
    hollow = FLAGS + "\n\ndef apply_flashinfer_allreduce_fusion(batch_size: int):\n    return batch_size > 0\n"
    moved = "srt/layers/fusion_gates.py"
    package = write_mini_sglang(tmp_path / "site", files={**FILES, COMM: hollow, moved: GATE_ALONE})
    plan = make_plan(from_directory(package), list(all_patches()), change=True)
    (gate,) = [r for r in plan.reports if r.id == "communicator-fusion-gate"]
    assert (gate.file, gate.found_by, gate.state) == (moved, "role", State.PENDING)


def test_a_preflight_whose_known_function_no_longer_holds_the_multicast_is_looked_for_by_role(tmp_path: Path) -> None:
    """The release's row expects the multicast statements in
    _flashinfer_trtllm_workspace_allocation_sizes; it now calls a helper of another module for
    them (nothing to change there), so the preflight is looked for by role: in the helper."""
    hollow = (
        "from sglang.srt.layers.multicast_sizes import multicast_aligned\n\n\n"
        "def _flashinfer_trtllm_workspace_allocation_sizes(cuda_driver, prop, sizes):\n"
        "    return [multicast_aligned(cuda_driver, prop, size) for size in sizes]\n"
    )
    helper = (
        "def multicast_aligned(cuda_driver, prop, size):\n"
        "    mc_prop = cuda_driver.CUmulticastObjectProp()\n"
        "    err, mc_granularity = cuda_driver.cuMulticastGetGranularity(mc_prop, 0)\n"
        "    return size + mc_granularity\n"
    )
    helper_rel = "srt/layers/multicast_sizes.py"
    package = write_mini_sglang(tmp_path / "site", files={**FILES, FUSION: hollow, helper_rel: helper})
    plan = make_plan(from_directory(package), list(all_patches()), change=False)
    (preflight,) = [r for r in plan.reports if r.id == PREFLIGHT]
    assert (preflight.file, preflight.found_by) == (helper_rel, "role")


def test_a_limit_renamed_with_its_moved_gate_is_read_and_set_under_its_new_name(tmp_path: Path) -> None:
    """The gate moved and its constant renamed: the role find reads the constant the gate
    compares with, and the limit is shown and set under that name, with its value."""
    moved = "srt/layers/fusion_gates.py"
    gate = MOVED_GATE.replace("FUSE_ALLREDUCE_MAX_BATCH_SIZE", "MAX_FUSED_TOKENS")
    files = {**FILES, COMM: "from sglang.srt.utils import is_cuda\n\n_is_cuda = is_cuda()\n", moved: gate}
    package = write_mini_sglang(tmp_path / "site", files=files)
    said = {}
    for change in (False, True):
        plan = make_plan(from_directory(package), list(all_patches()), change=change, token_limit=512)
        (limit,) = [r for r in plan.reports if r.id == "fusion-token-limit"]
        assert (limit.file, limit.found_by, limit.state) == (moved, "role", State.PENDING)
        said[change] = (limit.state_after, limit.detail)
    assert said[False] == (State.PENDING, "will set the fusion token limit to 512 (now MAX_FUSED_TOKENS = 2048)")
    assert said[True] == (State.APPLIED, "fusion token limit 512: MAX_FUSED_TOKENS = 512")
    plan = make_plan(from_directory(package), list(all_patches()), change=False)  # no limit asked
    (limit,) = [r for r in plan.reports if r.id == "fusion-token-limit"]
    assert limit.state is State.NOT_NEEDED
    assert limit.detail.startswith("fusion token limit in force: 2048 (MAX_FUSED_TOKENS = 2048); ")


def test_a_gate_moved_with_its_flags_and_limit_is_patched_there_and_bench_hooks_that_module(tmp_path: Path) -> None:
    from sm120patch.patcher.commands.apply import apply as apply_tree
    from sm120patch.patcher.exports import gate_modules

    moved = "srt/layers/fusion_gates.py"
    files = {**FILES, COMM: "from sglang.srt.utils import is_cuda\n\n_is_cuda = is_cuda()\n", moved: MOVED_GATE}
    package = write_mini_sglang(tmp_path / "site", files=files)
    outcome = apply_tree(from_directory(package))
    assert outcome.exit_code == 0, outcome.headline
    assert outcome.plan is not None
    found = {r.id: (r.file, r.found_by) for r in outcome.plan.reports if r.file == moved}
    assert found == {
        "communicator-import": (moved, "role"),
        "communicator-flag": (moved, "role"),
        "communicator-fusion-gate": (moved, "role"),
        "fusion-token-limit": (moved, "role"),
    }
    text = (package / moved).read_text()
    assert "_is_sm120_supported = _is_cuda and is_sm120_supported()" in text
    assert "(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)" in text
    assert gate_modules(package)[0] == "sglang.srt.layers.fusion_gates"
    assert gate_modules(package)[1:] == tuple(module_name(rel) for rel in files_keeping(GATE))  # the table's
