"""bench server's configurations table and its answer (``render._render_configs``), from a
result built by hand (hand.py): shown only with both an answer and the agreement it was held
to; each configuration one row (its decode medians, its answers' status and lowest cosine),
cut short on a narrow terminal rather than wrapped; the lines under it kept to 80 columns."""

from __future__ import annotations

import dataclasses
import io

import pytest
from rich.console import Console

from sm120patch.bench.server import driver, render
from sm120patch.bench.server.answer import Answer
from sm120patch.bench.server.answers import Check, Status
from sm120patch.bench.server.configs import BY_NAME
from tests.bench.server.hand import result, run

RUNS = [
    run("off", 1, {1: 10.0, 8: 12.0}),
    run("on", 1, {1: 9.0, 8: 11.0}),
    run("off", 1, {1: 9.5, 8: 11.5}, config="pcie-ipc"),
]
CHECKS = {
    "default": Check(Status.REFERENCE, None, "decode", 0, "the reference"),
    "fusion": Check(Status.AGREES, 0.99987, "decode", 0, "agrees"),
    "pcie-ipc": Check(Status.NAN, None, "decode", 3, "2 of its forwards had a NaN or an inf in their logits " * 2),
}
AGREEMENT = driver.Agreement(0.894, 0.9, 0.899)
ANSWER = Answer(
    [],
    {},
    "decode at TP 2: fusion is fastest at every batch size measured here, by 10 % against sglang's default",
    ["pcie-ipc"],
)


def done(**changes: object) -> driver.ServerResult:
    chosen = tuple(BY_NAME[name] for name in CHECKS)
    base = dataclasses.replace(result(runs=RUNS), chosen=chosen, checks=CHECKS, agreement=AGREEMENT, answer=ANSWER)
    return dataclasses.replace(base, **changes)


def shown(found: driver.ServerResult, width: int) -> list[str]:
    buffer = io.StringIO()
    render._render_configs(found, Console(file=buffer, width=width, color_system=None, force_terminal=True))
    return buffer.getvalue().splitlines()


def rows(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("│")]


@pytest.mark.parametrize("missing", ["answer", "agreement"])
def test_no_table_without_an_answer_and_its_agreement(missing: str) -> None:
    assert shown(done(**{missing: None}), 200) == []


def test_on_a_wide_terminal_80_columns_each_configuration_a_row() -> None:
    lines = shown(done(), 200)
    assert lines[:2] == [  # the title left-aligned, laid out to the table's 80 columns
        "configurations: decode ms/tok by batch size (median), answers against sglang's  ",
        "default" + " " * 73,
    ]
    assert rows(lines) == [
        "│ default                  │      10.00 │      12.00 │ reference               │",
        "│ fusion                   │       9.00 │      11.00 │ agrees 0.9999           │",
        "│ pcie-ipc                 │       9.50 │      11.50 │ nan                     │",  # no cosine
    ]
    assert max(len(line.rstrip()) for line in lines) == 80


def test_the_wrong_configurations_why_and_the_answer_wrap_at_80_columns() -> None:
    lines = shown(done(), 200)
    under = lines[lines.index(next(line for line in lines if line.startswith("└"))) + 1 :]
    assert under[0] == "answers agree at cosine >= 0.8940 (calibrated 0.9; default vs default 0.8990)"
    assert under[1].startswith("pcie-ipc: 2 of its forwards had a NaN")
    assert under[-2:] == [
        "answer: decode at TP 2: fusion is fastest at every batch size measured here, by",
        "10 % against sglang's default",
    ]
    assert len(under) > 4 and max(len(line) for line in under) <= 80  # the why took more than one line


def test_on_a_narrow_terminal_each_row_is_one_line_cut_short() -> None:
    assert rows(shown(done(), 42)) == [
        "│ default     │ 10… │ 12… │ reference    │",
        "│ fusion      │ 9.… │ 11… │ agrees 0.99… │",
        "│ pcie-ipc    │ 9.… │ 11… │ nan          │",
    ]
