"""``apply --auto-enable-tp 2|any`` on the miniature release: TP 2 by default, the form asked
written and recorded, kept by verify and a plain apply, switched both ways by another apply,
recorded where the code already has the form asked, refused where --skip leaves the patch out;
revert puts sglang's bytes back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import jrun
from tests.support.mini_sglang import SERVER_ARGS, write_mini_sglang
from tests.support.realtrees import sha256

PATCH = "server-args-auto-enable"
TP2 = "(is_sm90_supported() or is_sm100_supported() or (is_sm120_supported() and self.tp_size == 2))"
ANY = "(is_sm90_supported() or is_sm100_supported() or is_sm120_supported())"


@pytest.fixture
def package(tmp_path: Path) -> Path:
    return write_mini_sglang(tmp_path / "site")


def clause(package: Path) -> str:
    """The auto-enable's SM clause as the file has it now."""
    text = (package / SERVER_ARGS).read_text()
    return next(
        line.strip().removeprefix("and ")
        for line in text.splitlines()
        if "is_sm90_supported()" in line and "(" in line and "import" not in line
    )


def recorded(package: Path) -> str | None:
    return json.loads((package / ".sm120patch" / "manifest.json").read_text()).get("auto_enable_tp")


def said(out: dict) -> list[str]:
    return [m for m in out["messages"] if "auto-enable on SM12x" in m]


def state(out: dict) -> str:
    return next(r["state_after"] for r in out["patches"] if r["id"] == PATCH)


def test_tp2_by_default_then_any_then_back_each_recorded_and_kept(package: Path) -> None:
    before = sha256(package / SERVER_ARGS)
    code, out = jrun("apply", "--sglang-path", str(package))
    assert code == 0 and clause(package) == TP2 and recorded(package) is None
    (note,) = said(out)
    assert note.startswith("auto-enable on SM12x at TP 2 only for the models sglang lists (the default: ")
    assert "sglang#32330" in note and "--auto-enable-tp any" in note
    assert "an explicit fusion flag on the server still fuses at any TP" in note

    code, out = jrun("apply", "--sglang-path", str(package), "--auto-enable-tp", "any")
    assert code == 0 and clause(package) == ANY and recorded(package) == "any"
    assert said(out)[0].startswith(
        "auto-enable on SM12x at any TP for the models sglang lists (as `--auto-enable-tp any` asked)"
    )
    code, out = jrun("verify", "--sglang-path", str(package))
    assert code == 0 and state(out) == "applied"  # judged against the recorded ask, not the default
    code, out = jrun("apply", "--sglang-path", str(package))  # a plain apply keeps it, and says why
    assert code == 0 and clause(package) == ANY and recorded(package) == "any" and not out["written"]
    assert said(out)[0].startswith(
        "auto-enable on SM12x at any TP for the models sglang lists (as `--auto-enable-tp any` asked)"
    )

    code, out = jrun("apply", "--sglang-path", str(package), "--auto-enable-tp", "2")
    assert code == 0 and clause(package) == TP2 and recorded(package) == "2"
    code, out = jrun("revert", "--sglang-path", str(package))
    assert code == 0 and sha256(package / SERVER_ARGS) == before


def test_a_reinstall_gets_the_recorded_form_back(package: Path) -> None:
    """sglang's file put back (a reinstall keeps the state folder): a plain apply writes the form
    the last apply was asked for, not the default."""
    pristine = (package / SERVER_ARGS).read_bytes()
    assert jrun("apply", "--sglang-path", str(package), "--auto-enable-tp", "any")[0] == 0
    (package / SERVER_ARGS).write_bytes(pristine)
    code, out = jrun("apply", "--sglang-path", str(package))
    assert code == 0 and clause(package) == ANY and f"sglang/{SERVER_ARGS}" in out["written"]


def test_verify_after_a_hand_edit_away_from_the_recorded_form_says_pending(package: Path) -> None:
    assert jrun("apply", "--sglang-path", str(package), "--auto-enable-tp", "any")[0] == 0
    path = package / SERVER_ARGS
    path.write_text(path.read_text().replace(ANY, TP2))
    code, out = jrun("verify", "--sglang-path", str(package))
    assert code == 1 and state(out) == "pending"


def test_the_form_asked_is_recorded_where_the_code_already_has_it(package: Path) -> None:
    """A hand edit (the `sed`) added the bare SM120 term: applied as it is, and the report says
    it fuses at any TP; asking for any writes nothing to sglang but records the ask."""
    path = package / SERVER_ARGS
    text = path.read_text().replace(
        "is_sm90_supported, is_sm100_supported", "is_sm90_supported, is_sm100_supported, is_sm120_supported"
    )
    path.write_text(text.replace("(is_sm90_supported() or is_sm100_supported())", ANY))
    code, out = jrun("apply", "--sglang-path", str(package), "--dry-run")
    assert code == 0 and "server_args.py" not in out["diff"]
    code, out = jrun("apply", "--sglang-path", str(package))
    assert code == 0 and clause(package) == ANY
    assert "a hand edit?" in said(out)[0]
    code, out = jrun("apply", "--sglang-path", str(package), "--auto-enable-tp", "any")
    assert code == 0 and clause(package) == ANY and recorded(package) == "any"


def test_refused_where_the_patch_is_left_out(package: Path) -> None:
    code, out = jrun("apply", "--sglang-path", str(package), "--skip", PATCH, "--auto-enable-tp", "any")
    assert code == 2 and "--auto-enable-tp needs the server-args-auto-enable patch" in json.dumps(out)
    assert out["code"] == "usage"


def test_a_manifest_with_the_ask_says_so_to_an_older_sm120patch(package: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Format 5 where the ask is recorded: a tool of format 4 says "upgrade", not "corrupted"
    (nor drops the ask); a plain apply's manifest keeps the lowest format."""
    from sm120patch.patcher.transaction import state_dir as state_module

    assert jrun("apply", "--sglang-path", str(package))[0] == 0
    assert json.loads((package / ".sm120patch" / "manifest.json").read_text())["format"] == 2
    assert jrun("apply", "--sglang-path", str(package), "--auto-enable-tp", "any")[0] == 0
    assert json.loads((package / ".sm120patch" / "manifest.json").read_text())["format"] == 5
    monkeypatch.setattr(state_module, "FORMAT", 4)  # sm120patch as it was before --auto-enable-tp
    code, out = jrun("verify", "--sglang-path", str(package))
    assert code == 2 and "was written by a newer sm120patch (state format 5, " in json.dumps(out)


def test_the_ask_is_recorded_on_a_tree_patched_wholly_by_hand(package: Path) -> None:
    """Every file already as the patches leave them, bare SM120 term included, and no saved
    state: `--auto-enable-tp any` writes no sglang file but records the ask, which a later
    apply keeps after a reinstall."""
    pristine = (package / SERVER_ARGS).read_bytes()
    assert jrun("apply", "--sglang-path", str(package), "--auto-enable-tp", "any")[0] == 0
    patched = {p: p.read_bytes() for p in package.rglob("*.py") if ".sm120patch" not in p.parts}
    assert jrun("revert", "--sglang-path", str(package))[0] == 0
    for path, data in patched.items():  # the same edits, made by hand: no saved state
        path.write_bytes(data)
    assert not (package / ".sm120patch").exists()
    code, out = jrun("apply", "--sglang-path", str(package), "--auto-enable-tp", "any")
    assert code == 0 and out["written"] == [] and recorded(package) == "any"
    (package / SERVER_ARGS).write_bytes(pristine)
    assert jrun("apply", "--sglang-path", str(package))[0] == 0 and clause(package) == ANY
