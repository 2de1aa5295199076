"""sglang/layout.py: the files the table names for a place, newest layout first; the file a
release kept a place in (none before the first); a module file as sglang imports it."""

from __future__ import annotations

import pytest

from sm120patch.sglang.layout import (
    ADD_NORM,
    AUTO_ENABLE,
    COMMUNICATOR,
    GATE,
    OVERRIDES,
    SERVER_ARGS,
    files_keeping,
    kept_in,
    module_name,
)


def test_the_files_keeping_a_place_are_the_tables_newest_first() -> None:
    assert files_keeping(GATE) == (ADD_NORM, COMMUNICATOR)
    assert files_keeping(AUTO_ENABLE) == (OVERRIDES, SERVER_ARGS)


@pytest.mark.parametrize(
    ("version", "file"), [("0.5.20", COMMUNICATOR), ("0.5.21", ADD_NORM), ("0.4.8", None)], ids=str
)
def test_a_release_keeps_the_gate_in_one_file_or_none_before_the_first(version: str, file: str | None) -> None:
    assert kept_in(GATE, version) == file


@pytest.mark.parametrize(
    ("rel", "dotted"),
    [
        ("srt/layers/communicator.py", "sglang.srt.layers.communicator"),
        ("srt/layers/__init__.py", "sglang.srt.layers"),
        ("srt/layers/layer_boundary/__init__.py", "sglang.srt.layers.layer_boundary"),
        ("__init__.py", "sglang"),
    ],
)
def test_a_module_file_is_named_as_sglang_imports_it(rel: str, dotted: str) -> None:
    assert module_name(rel) == dotted
