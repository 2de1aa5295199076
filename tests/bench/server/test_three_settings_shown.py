"""What bench server --fuse-up-to shows beside the decode table: the three settings (off, on up
to sglang's limit, on up to the limit asked) side by side in an 80-column table, and their three
lines on the plot; results built by hand (hand.py)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from rich.console import Console

from sm120patch.bench.server import render
from sm120patch.bench.server.driver import ServerResult
from sm120patch.bench.server.verdict import Kind, Row, Verdict
from tests.bench.kernel.test_render import Recorder
from tests.bench.server.hand import result


def three_settings(limit: bool = True) -> ServerResult:
    """A --fuse-up-to 256 bench at TP 2, batch 1 and 8 of 256 input tokens.  Without ``limit``
    it stopped before the run with the lower limit, so that setting has no figures."""
    rows = [
        Row(1, [10.0, 10.2], [9.0, 9.2], [9.5, 9.7], {"off": [0.040, 0.042], "on": [0.050, 0.052]}),
        Row(8, [12.0, 12.2], [11.0, 11.2], [11.5, 11.5], {"off": [0.32, 0.33], "on": [0.384, 0.39]}),
    ]
    if limit:  # prefill at the lower limit: 256 and 2,048 tokens are both above 256, so unfused as off
        rows[0].prefill_s["limit"] = [0.041, 0.041]
        rows[1].prefill_s["limit"] = [0.32, 0.33]
    else:
        rows = [Row(r.batch_size, r.off_ms, r.on_ms, [], r.prefill_s) for r in rows]
    return result(rows=rows, verdict=Verdict(Kind.MIXED, "the advice"), fuse_up_to=256, sglang_limit=2048)


def three_settings_block(done: ServerResult, width: int) -> list[str]:
    """The lines of the three-settings table, title included, as a terminal of ``width`` shows them."""
    buffer = io.StringIO()
    render.render(done, Console(file=buffer, width=width, no_color=True))
    lines = buffer.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("three settings:"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("└"))
    return lines[start : end + 1]


THREE_SETTINGS_80 = [
    "three settings: off / on up to sglang's 2048 / on up to 256 tokens (prefill:    ",
    "batch x input tokens)                                                           ",
    "┏━━━━━━━━┳━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━┓",
    "┃  batch ┃   prefill tok ┃               prefill ms ┃            decode ms/tok ┃",
    "┡━━━━━━━━╇━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━┩",
    "│      1 │           256 │    41.00 / 51.00 / 41.00 │      10.10 / 9.10 / 9.60 │",
    "│      8 │         2,048 │          325 / 387 / 325 │    12.10 / 11.10 / 11.50 │",
    "└────────┴───────────────┴──────────────────────────┴──────────────────────────┘",
]


def test_the_three_settings_on_a_wide_terminal_are_80_columns_right_aligned() -> None:
    """Each cell reads off / sglang's limit / the limit asked; prefill in ms of the median run."""
    assert three_settings_block(three_settings(), width=200) == THREE_SETTINGS_80


def test_the_three_settings_on_a_narrow_terminal_cut_cells_short_rather_than_wrap() -> None:
    block = three_settings_block(three_settings(), width=60)
    assert {len(line) for line in block} == {60}
    top, bottom = (next(i for i, line in enumerate(block) if line.startswith(c)) for c in "┡└")
    assert block[top + 1 : bottom] == [  # one line a batch size, as many figures as fit
        "│  1 │      256 │ 41.00 / 51.00 / 41… │ 10.10 / 9.10 / 9.… │",
        "│  8 │    2,048 │     325 / 387 / 325 │ 12.10 / 11.10 / 1… │",
    ]


def test_a_setting_that_never_ran_shows_a_dash() -> None:
    """A bench stopped before the run with the lower limit: its prefill and decode say "-"."""
    rows = three_settings_block(three_settings(limit=False), width=200)[5:7]
    assert rows == [
        "│        1 │             256 │      41.00 / 51.00 / - │       10.10 / 9.10 / - │",
        "│        8 │           2,048 │          325 / 387 / - │      12.10 / 11.10 / - │",
    ]


def plotted(done: ServerResult, path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The lines ``plot`` draws (``ax.errorbar``'s arguments), matplotlib being the Recorder of
    tests/bench/kernel/test_render.py: every call recorded, nothing drawn."""
    calls: list[tuple] = []
    fake = Recorder(calls)
    monkeypatch.setitem(sys.modules, "matplotlib", fake)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", Recorder(calls, "plt"))
    fake.pyplot = sys.modules["matplotlib.pyplot"]  # type: ignore[attr-defined]
    render.plot(done, path)
    assert ("fig.savefig", (path,), {}) in calls
    return [(args, kwargs) for name, args, kwargs in calls if name == "ax.errorbar"]


def test_the_plot_draws_a_third_line_for_the_limit_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = plotted(three_settings(), tmp_path / "server.png", monkeypatch)
    assert [kwargs["label"] for _, kwargs in lines][2:] == ["fusion on up to 256 tokens"]
    (sizes, medians), kwargs = lines[2]
    assert (sizes, medians) == ([1, 8], [9.6, 11.5])  # the limit runs' medians, with their range
    assert kwargs["yerr"] == [[pytest.approx(0.1), 0.0], [pytest.approx(0.1), 0.0]]


def test_a_bench_stopped_before_the_limit_run_still_plots_off_and_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The "on" run failed its check, so the lower limit never ran: no line for it, and no
    traceback (it raised on the empty runs before)."""
    lines = plotted(three_settings(limit=False), tmp_path / "server.png", monkeypatch)
    assert [kwargs["label"].split(" (")[0] for _, kwargs in lines] == ["fusion off", "fusion on"]
