"""Each configuration's figures by batch size, as the answer weighs them (``driver.figures``:
every run's, in ms) and as the JSON shows them (``render``: the median, in ms), with the
JSON of the answer and of the agreement it was held to.  Results built by hand (hand.py)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from sm120patch.bench.server import driver, render
from sm120patch.bench.server.answer import Answer, Launch, Part
from sm120patch.bench.server.answers import Check, Status
from sm120patch.bench.server.configs import BY_NAME
from tests.bench.server.hand import FLAGS, measurement, result, run

#: A failed run first (its figures never count, and the runs after it still do), a run
#: without a figure (PCIe-IPC took no allreduce), then two default runs and one fusion run:
#: decode 10.0 / 10.4 and 9.0 ms, prefill 30 / 34 and 25 ms; batch 8 has no decode in the
#: second default run, only its prefill.
RUNS = [
    run("off", 1, {1: 50.0}, error="its output could not be read"),
    run("off", 1, {1: 60.0}, config="pcie-ipc", unused="pcie-ipc has no figure"),
    run("off", 1, {}, measurements=[measurement(1, 0.010, prefill_latency_s=0.030)]),
    run("off", 2, {}, measurements=[measurement(1, 0.0104, prefill_latency_s=0.034), measurement(8, None)]),
    run("on", 1, {}, measurements=[measurement(1, 0.009, prefill_latency_s=0.025)]),
]


def test_figures_are_each_configurations_latencies_in_ms_by_batch_size() -> None:
    decode = driver.figures(RUNS, "decode")
    prefill = driver.figures(RUNS, "prefill")
    assert decode == {"default": {1: [pytest.approx(10.0), pytest.approx(10.4)]}, "fusion": {1: [pytest.approx(9.0)]}}
    assert prefill == {
        "default": {1: [pytest.approx(30.0), pytest.approx(34.0)], 8: [pytest.approx(20.0)]},
        "fusion": {1: [pytest.approx(25.0)]},
    }


def shown(**changes: Any) -> dict[str, Any]:
    done = dataclasses.replace(result(runs=RUNS), **changes)
    return json.loads(json.dumps(render.to_json(done)))  # plain JSON types only


def test_each_configurations_json_has_the_medians_of_its_figures_and_its_answers() -> None:
    checked = Check(Status.NAN, None, "decode", 3, "2 forwards had a NaN")
    data = shown(chosen=(BY_NAME["default"], BY_NAME["fusion"]), checks={"fusion": checked})
    default, fusion = data["configs"]
    assert default == {
        "name": "default",
        "sentence": BY_NAME["default"].sentence,
        "fusion": "off",
        "env": {},
        "server_args": list(FLAGS.off),
        "answers": None,  # no check for it
        "decode_ms": {"1": pytest.approx(10.2)},
        "prefill_ms": {"1": pytest.approx(32.0), "8": pytest.approx(20.0)},
    }
    assert fusion == {
        "name": "fusion",
        "sentence": BY_NAME["fusion"].sentence,
        "fusion": "on",
        "env": {},
        "server_args": list(FLAGS.on),
        "answers": {"status": "nan", "cosine": None, "step": "decode", "nonfinite_forwards": 3, "why": checked.why},
        "decode_ms": {"1": pytest.approx(9.0)},
        "prefill_ms": {"1": pytest.approx(25.0)},
    }


def test_the_json_of_the_agreement_and_of_the_answer() -> None:
    part = Part("decode", "fusion", -9.5, 2.34567, {"default": 1.0, "fusion": 0.905}, {1: "fusion", 8: "default"})
    found = Answer([part], {"fusion": Launch({}, FLAGS.on, None)}, "decode at TP 2: fusion is fastest", [])
    data = shown(agreement=driver.Agreement(0.894, 0.9, 0.899), answer=found)
    assert data["agreement"] == {
        "threshold": 0.894,
        "base_threshold": 0.9,
        "default_vs_default": 0.899,
        "self_margin": 0.005,
    }
    assert data["answer"]["parts"] == [
        {
            "part": "decode",
            "config": "fusion",
            "vs_default_pct": -9.5,
            "noise_pct": 2.35,  # rounded to 2 places
            "vs_default_ratio": {"default": 1.0, "fusion": 0.905},
            "fastest_by_batch": {"1": "fusion", "8": "default"},
        }
    ]
