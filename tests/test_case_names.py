"""Table tests name their cases: conftest's ``pytest_make_parametrize_id`` gives a row's value
a readable id where pytest would only number it (``args0``), so a failure says which row."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from sm120patch.patcher.plan.registry import all_patches
from tests.conftest import pytest_make_parametrize_id as case_id


def test_a_command_line_is_named_by_its_words() -> None:
    assert case_id(None, ["bench", "kernel", "--tp", "1"], "args") == "bench kernel --tp 1"
    assert case_id(None, ("verify", 3, 0.5), "args") == "verify 3 0.5"
    assert case_id(None, ["x" * 100], "args") == "x" * 60


def test_a_patch_or_an_example_is_named_by_its_id_or_name() -> None:
    patch = all_patches()[0]
    assert case_id(None, patch, "patch") == patch.id
    assert case_id(None, SimpleNamespace(name="no SM100 flag"), "example") == "no SM100 flag"


@pytest.mark.parametrize(
    "value",
    [[], [["nested"]], Path("/srv/sglang"), "text", 7, SimpleNamespace(other=1), SimpleNamespace(name="")],
    ids=["empty", "nested", "path", "str", "int", "nameless", "empty-name"],
)
def test_anything_else_keeps_pytests_own_id(value: object) -> None:
    assert case_id(None, value, "value") is None
