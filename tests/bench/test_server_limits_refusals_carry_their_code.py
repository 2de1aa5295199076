"""``bench server --fuse-up-to`` (bench/fuse_limit.server_limits) refuses, with the code
``usage``, the value ``sglang`` (it is the fusion-on setting itself: the refusal names what to
give instead) and a release without a fusion token limit to lower (the refusal names the
release)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120patch.bench import fuse_limit
from sm120patch.errors import EnvironmentProblem
from sm120patch.patcher.exports import SGLANG
from sm120patch.sglang.tree import from_directory
from tests.cli.test_fuse_up_to import LIMITED
from tests.support.mini_sglang import COMM, FILES, write_mini_sglang


def refusal(package: Path, value: int | str) -> EnvironmentProblem:
    with pytest.raises(EnvironmentProblem) as raised:
        fuse_limit.server_limits(from_directory(package), value, 2)
    return raised.value


def test_sglang_is_usage_and_names_the_values_to_give(tmp_path: Path) -> None:
    """Refused before the release is read: even one with a limit of its own."""
    found = refusal(write_mini_sglang(tmp_path / "site", files={**FILES, COMM: LIMITED}), SGLANG)
    assert found.code == "usage"
    assert str(found).startswith("bench server --fuse-up-to sglang ")
    assert str(found).endswith("give N or measured")


def test_a_release_without_a_limit_to_lower_is_usage_and_named(tmp_path: Path) -> None:
    package = write_mini_sglang(tmp_path / "site")
    found = refusal(package, 512)
    assert found.code == "usage"
    assert f"sglang {from_directory(package).version} has no fusion token limit" in str(found)
