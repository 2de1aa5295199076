"""``apply --tp`` without ``--fuse-up-to measured`` (bench/fuse_limit.asked_limit) is refused
with the stable code ``usage`` before anything is read: the refusal names the option ``--tp``
goes with, what it means, and the value it was given with instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120patch.bench import fuse_limit
from sm120patch.errors import EnvironmentProblem
from sm120patch.patcher.exports import SGLANG
from sm120patch.sglang.tree import SglangTree, from_directory
from tests.support.mini_sglang import write_mini_sglang

GOES_WITH = "--tp is for --fuse-up-to measured"


@pytest.fixture
def tree(tmp_path: Path) -> SglangTree:
    return from_directory(write_mini_sglang(tmp_path / "site"))


def refusal(tree: SglangTree, value: int | str | None) -> EnvironmentProblem:
    with pytest.raises(EnvironmentProblem) as raised:
        fuse_limit.asked_limit(tree, value, 2)
    return raised.value


def test_tp_alone_is_usage_and_says_what_the_tp_is(tree: SglangTree) -> None:
    found = refusal(tree, None)
    assert (found.code, str(found).startswith(GOES_WITH)) == ("usage", True), str(found)
    assert "the TP the saved bench result must have" in str(found)


@pytest.mark.parametrize("value", [512, SGLANG])
def test_tp_with_another_limit_is_usage_naming_that_limit(tree: SglangTree, value: int | str) -> None:
    found = refusal(tree, value)
    assert (found.code, str(found)) == ("usage", f"{GOES_WITH}, not --fuse-up-to {value}")


def test_without_tp_or_limit_the_limit_is_left_as_it_is(tree: SglangTree) -> None:
    assert fuse_limit.asked_limit(tree, None, None) is None
