"""``sm120patch list`` on the miniature release (tests/support/mini_sglang.py): the patches,
their state in this sglang, and with ``--docs`` what each does and where it looks."""

from __future__ import annotations

from pathlib import Path

from sm120patch.patcher.plan.registry import all_patches
from tests.support.cli import jrun, run, tree_hashes
from tests.support.mini_sglang import FILES, VERSION, write_mini_sglang
from tests.support.patch_checks import expected_states

STATES = expected_states(VERSION)
HEADLINE = f"{len(all_patches())} patches"  # as many as are registered, not a number to keep up to date


def test_list_says_how_many_patches_and_the_state_of_each(mini: Path) -> None:
    before = tree_hashes(mini)
    code, data = jrun("list", "--sglang-path", str(mini))
    assert (code, data["command"], data["headline"], data["refusal"]) == (0, "list", HEADLINE, None)
    assert {p["id"]: p["state"] for p in data["patches"]} == STATES
    assert all(p["state_after"] == p["state"] for p in data["patches"])
    assert tree_hashes(mini) == before  # listing writes nothing


def test_list_as_text_one_row_per_patch_under_its_file(mini: Path) -> None:
    code, out, err = run("list", "--sglang-path", str(mini))
    lines = [line.rstrip() for line in err.splitlines()]
    assert code == 0 and out == ""
    assert lines[0] == f"sglang 0.5.11  {mini.resolve()}  [wheel]" and lines[-1] == HEADLINE
    headings = [line for line in lines if line.startswith("sglang/")]
    assert headings == [
        "sglang/srt/layers/communicator.py",
        "sglang/srt/layers/flashinfer_comm_fusion.py",
        "sglang/srt/server_args.py",
    ]
    rows = {line.split()[0]: line.split()[1] for line in lines if line.startswith("  ") and line.split()[0] in STATES}
    assert rows == STATES
    assert not any(line.startswith("evidence") for line in lines)  # verify shows it, list does not


def test_list_docs_prints_each_patchs_description_on_stdout(mini: Path) -> None:
    code, out, err = run("list", "--sglang-path", str(mini), "--docs")
    assert code == 0
    patches = all_patches()
    for patch in patches:
        assert f"\n{patch.id}: {patch.summary}\n" in out
        assert f"  {patch.id}" in err and patch.summary in err  # the summary, not the detail, in the table
    assert out.count("  where it looks:\n") == len(patches)
    roles = [p for p in patches if p.role is not None]
    assert roles and out.count("  where no row matches, by role: ") == len(roles)
    assert all(" ".join(p.role.what.split()) in " ".join(out.split()) for p in roles if p.role)
    assert "will widen" not in err


def test_list_on_a_release_without_the_sm12x_probe_says_why_none_applies(tmp_path: Path) -> None:
    files = dict(FILES)
    files["srt/utils/common.py"] = files["srt/utils/common.py"].replace("def is_sm120_supported", "def is_sm12x")
    package = write_mini_sglang(tmp_path / "site", files=files)
    why = (
        "sglang 0.5.11 has no SM12x probe (sglang.srt.utils.is_sm120_supported, added in 0.5.4), so its fusion "
        "gates cannot be widened without adding GPU detection to sglang. Upgrade to sglang >= 0.5.4."
    )
    code, data = jrun("list", "--sglang-path", str(package))
    assert (code, data["headline"], data["refusal"]) == (0, why, why)
    assert {p["id"]: (p["state"], p["file"], p["detail"]) for p in data["patches"]} == {
        ident: ("refused", None, why) for ident in STATES
    }
    code, _, err = run("list", "--sglang-path", str(package))
    assert code == 0 and err.splitlines()[1:] == [why]
