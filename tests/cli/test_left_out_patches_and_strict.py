"""A patch left out as asked (``apply --skip`` / ``--only``) on the miniature release: its clause
is named as that patch (``left_out``), never as an SM check this tool does not know, and
``--strict`` refuses only where the left-out patch keeps the fused path shut.  The advice the
tool prints (bench's verdict, doctor's escape hatch, the warning's own apply) passes
``--strict`` when followed.  Real releases: tests/cli/test_left_out_real_releases.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sm120patch.bench.kernel.command import keep_off
from sm120patch.bench.kernel.verdict import KEEP_OFF_DEFAULT
from sm120patch.bench.server.flags import choose
from sm120patch.doctor.launch_advice import escape
from sm120patch.sglang.options import ENABLE, HATCH
from tests.support.cli import jrun, run, tree_hashes
from tests.support.fakes import fake_flashinfer
from tests.support.mini_sglang import FILES, FILES_0_5_15, FUSION, OVERRIDES, SERVER_ARGS, write_mini_sglang

SHUT = "[left-out-shuts-fusion]"


def printed_commands(advice: str) -> tuple[str, ...]:
    """The ``sm120patch ...`` commands quoted in ``advice``, in order, as arguments."""
    return tuple(re.findall(r"`sm120patch ([^`]*)`", advice))


#: Every sequence of commands the bench verdicts and doctor advise to keep fusion opt-in.
ADVICE = {
    printed_commands(text)
    for text in (KEEP_OFF_DEFAULT, keep_off({HATCH}), keep_off(set()), escape(set()), choose({ENABLE}).keep_off)
}


def test_the_advice_is_one_revert_then_one_apply() -> None:
    assert sorted(ADVICE) == [("revert", "apply --skip server-args-auto-enable")]


@pytest.fixture(params=["0.5.11", "0.5.15"])
def release(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The miniature release (0.5.11: the auto-enable in server_args.py; 0.5.15: in
    arg_groups/overrides.py, on the fused path) with FlashInfer's SM12x kernel beside it."""
    files = FILES_0_5_15 if request.param == "0.5.15" else FILES
    package = write_mini_sglang(tmp_path / "site", request.param, files)
    fake_flashinfer(package.parent, "0.6.18", [9, 10, 12])
    return package


def auto_enable(release: Path) -> dict:
    if (release / OVERRIDES).exists():
        return {"file": f"sglang/{OVERRIDES}", "line": 10, "function": "_flashinfer_allreduce_fusion_auto_enable"}
    return {"file": f"sglang/{SERVER_ARGS}", "line": 10, "function": "ServerArgs._handle_model_specific_adjustments"}


@pytest.mark.parametrize("advice", sorted(ADVICE))
@pytest.mark.parametrize("patched", [False, True], ids=["as-released", "patched"])
def test_the_printed_advice_then_verify_strict_passes(release: Path, advice: tuple[str, ...], patched: bool) -> None:
    """Followed as printed, on a tree as released or one apply patched (where the auto-enable
    is applied, and ``--skip`` alone would leave it so), the advice leaves the auto-enable out."""
    if patched:
        code, data = jrun("apply", "--sglang-path", str(release))
        assert code == 0 and data["left_out"] == []
    for command in advice:
        code, data = jrun(*command.split(), "--sglang-path", str(release))
        assert code == 0, data["headline"]
    assert data["warnings"] == [] and data["sm_checks"] == []
    left = {"patch": "server-args-auto-enable", **auto_enable(release), "keeps_fused_path_shut": False}
    assert data["left_out"] == [left]
    code, data = jrun("verify", "--strict", "--sglang-path", str(release))
    assert code == 0, data["headline"]
    assert data["warnings"] == [] and data["sm_checks"] == [] and data["left_out"] == [left]
    # The image build's own line: apply --strict with the advice, on the tree it left.
    assert jrun(*advice[-1].split(), "--strict", "--sglang-path", str(release))[0] == 0


def test_apply_strict_with_the_advice_on_a_fresh_tree_writes(release: Path) -> None:
    code, data = jrun("apply", "--strict", "--skip", "server-args-auto-enable", "--sglang-path", str(release))
    assert code == 0 and data["written"] and data["warnings"] == []


def test_the_text_names_the_clause_as_the_patch_left_out(release: Path) -> None:
    assert run("apply", "--skip", "server-args-auto-enable", "--sglang-path", str(release))[0] == 0
    code, _, err = run("verify", "--strict", "--sglang-path", str(release))
    where = auto_enable(release)
    said = " ".join(err.split())
    assert code == 0 and "an SM check this tool does not know" not in said
    assert (
        f"left out as asked (--only / --skip): server-args-auto-enable at {where['file']}:{where['line']} "
        f"{where['function']}: it only decides whether models turn fusion on by themselves; "
        "the launch flag still does" in said
    )


@pytest.fixture
def mini_0_5_15(tmp_path: Path) -> Path:
    package = write_mini_sglang(tmp_path / "site", "0.5.15", FILES_0_5_15)
    fake_flashinfer(package.parent, "0.6.18", [9, 10, 12])
    return package


RESOLVER = {
    "patch": "fusion-backend-resolver",
    "file": f"sglang/{FUSION}",
    "line": 23,
    "function": "_resolve_backend",
    "keeps_fused_path_shut": True,
}
PREFLIGHT = {
    "patch": "workspace-preflight",
    "file": f"sglang/{FUSION}",
    "line": 14,
    "function": "_flashinfer_trtllm_workspace_allocation_sizes",
    "keeps_fused_path_shut": True,
}
SHUT_WARNING = (
    f"{SHUT} left out as asked (--only / --skip), fusion-backend-resolver (sglang/{FUSION}:23 _resolve_backend), "
    f"workspace-preflight (sglang/{FUSION}:14 _flashinfer_trtllm_workspace_allocation_sizes) keep the fused "
    "path shut on SM12x: `sm120patch apply --only fusion-backend-resolver,workspace-preflight` adds them"
)


def test_only_leaves_the_resolver_and_preflight_out_and_strict_says_so(mini_0_5_15: Path) -> None:
    before = tree_hashes(mini_0_5_15)
    only = ("apply", "--only", "communicator-fusion-gate", "--sglang-path", str(mini_0_5_15))
    code, data = jrun(*only, "--strict")
    assert code == 1 and data["written"] == [] and tree_hashes(mini_0_5_15) == before
    assert (data["code"], data["written"], len(data["warnings"])) == ("strict", [], 1)
    # The resolver's clause is its patch's, not unknown; the auto-enable's never refuses.
    assert data["warnings"] == [SHUT_WARNING] and data["sm_checks"] == []
    assert [(g["patch"], g["keeps_fused_path_shut"]) for g in data["left_out"]] == [
        ("fusion-backend-resolver", True),
        ("workspace-preflight", True),
        ("server-args-auto-enable", False),
    ]
    code, data = jrun(*only)
    assert code == 0 and data["warnings"] == [SHUT_WARNING]
    code, data = jrun("verify", "--strict", "--sglang-path", str(mini_0_5_15))
    assert code == 1 and data["warnings"] == [SHUT_WARNING] and data["sm_checks"] == []
    assert data["left_out"][:2] == [RESOLVER, PREFLIGHT]
    assert data["code"] == "strict" and data["headline"].startswith(
        "all patches applied, except fusion-backend-resolver"
    )
    # The way forward the warning prints, followed, passes --strict.
    (forward,) = printed_commands(SHUT_WARNING)
    assert jrun(*forward.split(), "--sglang-path", str(mini_0_5_15))[0] == 0
    code, data = jrun("verify", "--strict", "--sglang-path", str(mini_0_5_15))
    assert (
        code == 0 and data["warnings"] == [] and [g["patch"] for g in data["left_out"]] == ["server-args-auto-enable"]
    )


def test_a_gate_left_out_keeps_the_path_shut_where_the_sweep_sees_no_check(tmp_path: Path) -> None:
    """0.5.11's preflight holds no SM term: the sweep has nothing to say, the left-out patch does."""
    package = write_mini_sglang(tmp_path / "site")
    fake_flashinfer(package.parent, "0.6.18", [9, 10, 12])
    code, data = jrun("apply", "--skip", "workspace-preflight", "--strict", "--sglang-path", str(package))
    assert code == 1 and data["sm_checks"] == []
    assert data["warnings"] == [
        f"{SHUT} left out as asked (--only / --skip), workspace-preflight (sglang/{FUSION}:12 "
        "_flashinfer_trtllm_workspace_allocation_sizes) keeps the fused path shut on SM12x: "
        "`sm120patch apply --only workspace-preflight` adds it"
    ]


def test_skip_on_a_patched_tree_says_the_patch_stays_and_how_to_take_it_out(release: Path) -> None:
    """``--skip`` leaves a patch an earlier apply applied as it is: not a silent no-op, the note
    names it, and its commands, followed as printed, take it out."""
    assert jrun("apply", "--sglang-path", str(release))[0] == 0
    code, data = jrun("apply", "--skip", "server-args-auto-enable", "--sglang-path", str(release))
    assert (code, data["written"], data["left_out"]) == (0, [], [])  # still applied: not left out
    [note] = [m for m in data["messages"] if "stays applied" in m]
    assert note.startswith("server-args-auto-enable stays applied: ")
    for command in printed_commands(note):
        assert jrun(*command.split(), "--sglang-path", str(release))[0] == 0
    code, data = jrun("verify", "--strict", "--sglang-path", str(release))
    assert code == 0 and [g["patch"] for g in data["left_out"]] == ["server-args-auto-enable"]


def test_a_patch_left_out_and_never_applied_gets_no_such_note(release: Path) -> None:
    code, data = jrun("apply", "--skip", "server-args-auto-enable", "--sglang-path", str(release))
    assert code == 0 and not [m for m in data["messages"] if "stays applied" in m]
