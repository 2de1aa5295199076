"""``bench server --plan``'s text (``plan.render``), from a plan built by hand: each
configuration's line is its name in bold, then its sentence, then its command line."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from sm120patch.bench.server import plan

DATA: dict[str, Any] = {
    "sglang": {"version": "0.5.23", "location": "/site/sglang", "benchmark": "sglang.benchmark.one_batch"},
    "tp": 2,
    "configs": [
        {"name": "default", "sentence": "sglang as it ships", "env": {}, "args": ["python", "-m", "x"]},
        {"name": "fusion", "sentence": "fusion on", "env": {"A": "1"}, "args": ["python", "-m", "y"]},
    ],
    "skipped": [],
    "harness_env": {"SM120PATCH_NUMPY_SEED": "1234"},
    "notes": [],
}


def shown(**console: Any) -> str:
    buffer = io.StringIO()
    plan.render(DATA, Console(file=buffer, width=120, **console))
    return buffer.getvalue()


def test_each_configuration_is_its_name_and_sentence_then_its_command() -> None:
    lines = shown(color_system=None).splitlines()
    assert lines[1:5] == ["default: sglang as it ships", "  python -m x", "fusion: fusion on", "  A=1 python -m y"]


def test_the_name_is_bold() -> None:
    text = shown(force_terminal=True, color_system="standard")
    assert "\x1b[1mdefault\x1b[0m: sglang as it ships\n" in text
    assert "\x1b[1mfusion\x1b[0m: fusion on\n" in text
