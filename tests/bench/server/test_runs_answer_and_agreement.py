"""What the driver makes of its runs beyond the off / on table: the verdict when fusion was not
among the configurations, the threshold the answers were held to (lowered by the default's
agreement with itself), the answer's TP and the ``--fuse-up-to`` its launch applies, and the
logs written as UTF-8.  ``driver._one`` is replaced by test_driver_steps' stand-in (no sglang
process starts); the GPU probe by the ``host`` fixture's."""

from __future__ import annotations

import codecs
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from sm120patch.bench.server import answers, driver
from sm120patch.bench.server.counter import Counts
from sm120patch.bench.server.verdict import Kind
from tests.bench.server.hand import fused, logits_record
from tests.bench.server.test_driver_steps import server_run


def answered(head: list[float | None], counts: Counts | None = None) -> Counts:
    """A run's counts with the logits the hook saw (``head`` as their first row)."""
    return dataclasses.replace(counts or Counts(2, 2), logits=logits_record(head))


def test_without_fusion_among_the_configurations_the_answer_speaks(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = {("off", 1): {"decode_ms": {1: 10.0, 8: 12.0}}, ("off", 2): {"decode_ms": {1: 10.1, 8: 12.1}}}
    done, _, _ = server_run(host, monkeypatch, script, config_names=("default",))
    assert [c.name for c in done.chosen] == ["default"] and (done.rows, done.problems) == ([], [])
    assert done.verdict.kind is Kind.NONE
    assert done.verdict.advice.startswith("no verdict: fusion was not among the configurations run")


def test_the_defaults_agreement_with_itself_lowers_the_threshold(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = {
        ("off", 1): {"decode_ms": {1: 10.0}, "counts": answered([1.0, 0.0])},
        ("off", 2): {"decode_ms": {1: 10.1}, "counts": answered([0.6, 0.8])},  # cosine 0.6 against the first
    }
    done, _, _ = server_run(host, monkeypatch, script, config_names=("default",))
    assert done.agreement is not None
    assert done.agreement.default_vs_default == pytest.approx(0.6)
    assert done.agreement.threshold == pytest.approx(0.6 - answers.SELF_MARGIN)
    assert done.agreement.base == answers.COSINE_MIN


def test_the_answer_names_the_tp_and_the_limit_it_applies(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    limited = dataclasses.replace(fused(), token_limits={64})
    script = {
        ("off", 1): {"decode_ms": {1: 10.0}, "counts": answered([1.0, 2.0])},
        ("limit", 1): {"decode_ms": {1: 8.0}, "counts": answered([1.0, 2.0], limited)},
    }
    done, _, _ = server_run(host, monkeypatch, script, config_names=("fusion-limit",), fuse_up_to=64, repeat=1)
    assert done.answer is not None and done.problems == []
    assert done.answer.parts[0].config == "fusion-limit"
    assert done.answer.launches["fusion-limit"].apply == "sm120patch apply --fuse-up-to 64"
    assert done.answer.sentence.startswith("decode at TP 2: fusion-limit is fastest")


def test_each_runs_log_is_written_as_utf8(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``open`` in the driver is replaced by one that records the encoding each file is opened
    with: the log must not take the host locale's (sglang's lines are not all ASCII)."""
    opened: list[tuple[str, Any]] = []

    def recording_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        opened.append((Path(file).name, kwargs.get("encoding")))
        return open(file, mode, *args, **kwargs)

    monkeypatch.setattr(driver, "open", recording_open, raising=False)
    server_run(host, monkeypatch, {}, config_names=("default",), repeat=1)
    assert [name for name, _ in opened] == ["default-1.log"]
    assert all(encoding is not None and codecs.lookup(encoding).name == "utf-8" for _, encoding in opened)
