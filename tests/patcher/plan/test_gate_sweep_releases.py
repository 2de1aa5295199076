"""The sweep of SM checks on every real release: nothing is reported that the patches do not
own, except what the known list names, before apply and after it; the known list's rows are
each seen, in the releases they say."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.version import Version

from sm120patch.patcher.kit.model import Releases
from sm120patch.patcher.plan.current import read_state
from sm120patch.patcher.plan.gate_sweep import files_to_judge, sweep_tree, verdicts
from sm120patch.patcher.plan.registry import by_id
from sm120patch.sglang.fusion_path import KNOWN_GATES
from sm120patch.sglang.releases import ALL_RELEASES, LAST_KNOWN
from sm120patch.sglang.tree import from_directory
from tests.support.cli import apply_all, verify_tree

pytestmark = pytest.mark.slow  # real sglang releases from the package index

SUPPORTED = [v for v in ALL_RELEASES if Version(v) >= Version("0.5.4")]
SENTENCE = "an SM check this tool does not know"


@pytest.mark.parametrize("version", ALL_RELEASES)
def test_every_release_is_clean_before_and_after_apply(release: Callable[..., Path], version: str) -> None:
    package = release(version)
    tree = from_directory(package)
    judged = read_state(tree)
    if judged.plan.refusal:  # refused as a whole: nothing to sweep for
        assert version not in SUPPORTED
        assert sweep_tree(tree, judged.plan, judged.manifest, judged.by_hash).warnings == []
        return
    files, _ = files_to_judge(tree, judged.plan)
    found, unread = verdicts(files, judged.plan)
    assert unread == []
    assert [v.check.sentence() for v in found if v.reported] == []
    assert {v.owner for v in found if v.owner} <= set(by_id())
    applied = apply_all(package)
    assert applied.exit_code == 0 and not [w for w in applied.warnings if w.startswith(SENTENCE)]
    verified = verify_tree(package)
    assert verified.exit_code == 0 and not [w for w in verified.warnings if w.startswith(SENTENCE)]
    judged = read_state(tree)
    assert judged.by_hash and sweep_tree(tree, judged.plan, judged.manifest, judged.by_hash).recalled


def test_each_known_gate_is_seen_in_the_releases_it_names(release: Callable[..., Path]) -> None:
    seen: dict[int, list[str]] = {}
    for version in SUPPORTED:
        tree = from_directory(release(version))
        judged = read_state(tree)
        found, _ = verdicts(files_to_judge(tree, judged.plan)[0], judged.plan)
        for index in {KNOWN_GATES.index(v.known) for v in found if v.known is not None}:
            seen.setdefault(index, []).append(version)
    for index, known in enumerate(KNOWN_GATES):
        versions = seen.get(index)
        assert versions, f"{known.kind} in {known.function}: in no release"
        last = None if versions[-1] == LAST_KNOWN else versions[-1]
        assert str(Releases(versions[0], last)) == known.seen, known.function
        assert versions == [v for v in SUPPORTED if v in Releases(versions[0], versions[-1])], known.function
