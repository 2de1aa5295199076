"""The full cycle on real, pip-installed sglang releases of the hand fix's era (0.5.8-0.5.13.post1)."""

from __future__ import annotations

import pytest
from packaging.version import Version

from sm120patch.patcher.commands.apply import apply as apply_tree
from sm120patch.patcher.commands.revert import revert as revert_tree
from sm120patch.patcher.commands.verify import verify as verify_tree
from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan.registry import all_patches
from sm120patch.sglang.layout import COMM_FUSION, SERVER_ARGS
from sm120patch.sglang.layout import COMMUNICATOR as COMM
from sm120patch.sglang.tree import from_directory
from tests.support.cli import apply_all
from tests.support.hand_fix import SEED_LINES, grep_sm_lines
from tests.support.realtrees import assert_matches_record, intended_changes, record_hashes, sha256

pytestmark = pytest.mark.slow  # real sglang releases from the package index

E12 = ["0.5.8", "0.5.9", "0.5.10", "0.5.11", "0.5.12", "0.5.13", "0.5.13.post1"]


def test_apply_on_0_5_9_reproduces_the_hand_fix_exactly(release) -> None:
    package = release("0.5.9")
    outcome = apply_all(package)
    assert outcome.exit_code == 0, outcome.headline
    assert grep_sm_lines(package / COMM)[:10] == SEED_LINES
    report = verify_tree(from_directory(package))
    wrote = [r for r in report.plan.reports if r.file == COMM and r.state is State.APPLIED]  # not the opt-in limit
    evidence = [f"{e.line}:{e.text}" for r in wrote for e in r.evidence]
    assert sorted(set(evidence), key=lambda s: int(s.split(":")[0])) == SEED_LINES


@pytest.mark.parametrize("version", E12)
def test_full_cycle_of_the_hand_fix_era(release, version: str) -> None:
    package = release(version)
    tree = from_directory(package)
    originals = {rel: (package / rel).read_bytes() for rel in record_hashes(package) if rel.endswith(".py")}

    first = apply_tree(tree, list(all_patches()))
    assert first.exit_code == 0, first.headline
    touched = sorted(first.written)
    preflight = Version(version) >= Version("0.5.11")  # the workspace preflight arrives
    assert touched == [COMM] + ([COMM_FUSION] if preflight else []) + [SERVER_ARGS]
    states = {r.id: r.state_after for r in first.plan.reports}
    assert states == {
        "communicator-import": State.APPLIED,
        "communicator-flag": State.APPLIED,
        "communicator-fusion-gate": State.APPLIED,
        "server-args-auto-enable": State.APPLIED,
        "fusion-backend-resolver": State.NOT_NEEDED,  # arrives in 0.5.14
        "workspace-preflight": State.APPLIED if preflight else State.NOT_NEEDED,
        "fusion-token-limit": State.NOT_NEEDED,  # opt-in: apply --fuse-up-to
    }
    for rel in touched:
        compile((package / rel).read_bytes(), rel, "exec")
    assert sorted(intended_changes(originals[COMM], (package / COMM).read_bytes())) == ["flag", "import", "or-term"]
    # server_args.py differs from the release in exactly one expression.
    assert intended_changes(originals[SERVER_ARGS], (package / SERVER_ARGS).read_bytes()) == ["or-term"]
    # Nothing else in the tree changed.
    for rel, data in originals.items():
        if rel not in touched:
            assert (package / rel).read_bytes() == data, rel

    assert verify_tree(tree).exit_code == 0
    patched = {rel: sha256(package / rel) for rel in touched}
    again = apply_tree(tree, list(all_patches()))
    assert again.exit_code == 0 and again.written == []
    assert {rel: sha256(package / rel) for rel in touched} == patched

    back = revert_tree(tree)
    assert back.exit_code == 0, back.headline
    assert sorted(back.written) == touched
    assert_matches_record(package, touched)
    assert not (package / ".sm120patch" / "manifest.json").exists()
    after = verify_tree(tree)
    assert after.exit_code == 1 and after.headline.startswith("not patched: the files are sglang")
    assert not (package / ".sm120patch").exists()
