"""The measured variants are rows of one table: a new one shows without touching the verdict or the render."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from sm120patch.bench.kernel import measure, render, saved
from sm120patch.bench.kernel.measure import VARIANTS, Timing, Variant
from sm120patch.runner.ranks import RankLog
from tests.bench.kernel.test_render import SGLANG, result

#: A variant no release adds: what a new row of the table looks like.
GRAPHS_OFF = Variant(
    "graphs-off",
    "the unfused path eagerly, as --disable-cuda-graph runs it",
    launchable=True,
    since="a test's release",
    timed_as="graphs_off",
    header="eager",
    column=True,
    label="eager",
    words="CUDA graphs off (fusion off)",
    plot="unfused, eager",
)


@pytest.fixture
def with_graphs_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measure, "VARIANTS", (*VARIANTS, GRAPHS_OFF))


def test_the_table_names_each_variant_once_and_keeps_the_schema_2_fields() -> None:
    assert [v.name for v in VARIANTS] == ["fused", "unfused", "allreduce", "allreduce-on", "pcie-ipc"]
    fields = [f for v in VARIANTS for f in (v.json_field, v.name_field, v.why_field) if f]
    assert fields == [
        "fused",
        "unfused",
        "allreduce_name",
        "allreduce_why",
        "allreduce",
        "allreduce_fusion_on",
        "pcie_ipc",
        "pcie_ipc_allreduce",
    ]
    assert [v.name for v in VARIANTS if v.launchable] == ["fused", "unfused", "pcie-ipc"]  # fastest's candidates
    assert all(v.measures and v.since for v in VARIANTS)
    assert all(v.words and v.label for v in VARIANTS if v.launchable)


def test_a_new_variant_is_read_from_the_ranks_when_every_rank_timed_it(with_graphs_off: None) -> None:
    def event(rank_us: float | None) -> dict:
        timing = {"median_us": 5.0, "p90_us": 6.0}
        found = {
            "event": "row",
            "tokens": 8,
            "fused": timing,
            "unfused": {"median_us": 20.0, "p90_us": 21.0},
            "allreduce": timing,
            "max_abs_error": {"norm": 0.0},
            "tolerance": {},
            "ok": True,
        }
        if rank_us is not None:
            found["graphs_off"] = {"median_us": rank_us, "p90_us": rank_us + 1}
        return found

    (row,) = measure.combine([RankLog(0, events=[event(3.0)]), RankLog(1, events=[event(4.0)])])
    assert row.timings["graphs-off"] == Timing(4.0, 5.0)
    assert row.fastest == "graphs-off"
    (half,) = measure.combine([RankLog(0, events=[event(3.0)]), RankLog(1, events=[event(None)])])
    assert "graphs-off" not in half.timings and half.fastest == "fused"


def test_a_new_variant_shows_in_the_json_and_the_text(with_graphs_off: None) -> None:
    shown = result(baseline=SGLANG)
    shown.rows = [shown.rows[0].with_timing("graphs-off", Timing(3.0, 3.5), "NCCL"), *shown.rows[1:]]
    data = json.loads(json.dumps(render.to_json(shown)))
    first, second = data["rows"][0], data["rows"][1]
    assert first["variants"]["graphs-off"] == {
        "median_us": 3.0,
        "p90_us": 3.5,
        "allreduce": "NCCL",
        "allreduce_why": None,
    }
    assert (first["fastest"], second["fastest"]) == ("graphs-off", "fused")
    assert "graphs-off" not in second["variants"]
    assert data["variants"]["graphs-off"] == {
        "measures": "the unfused path eagerly, as --disable-cuda-graph runs it",
        "launchable": True,
        "since": "a test's release",
        "always": False,
    }
    # Every schema-2 field is still there, with its meaning; the new variant adds none of its own.
    assert set(first) - {"variants"} == set(render._row_json(result(baseline=SGLANG).rows[0])) - {"variants"}
    assert saved.crossover_of(data).reach.value == "always"  # fused against unfused, as before

    buffer = io.StringIO()
    render.render(shown, Console(file=buffer, width=200, no_color=True))
    lines = buffer.getvalue().splitlines()
    cells = [[cell.strip() for cell in line.split(line[0])[1:-1]] for line in lines if line[:1] in "┃│"]
    assert cells[0] == ["tokens", "fused", "unfused", "AR alone", "eager", "vs unfused", "max err"]
    assert [row[4] for row in cells[1:]] == ["3.0/3.5", "—", "—"]
    assert (
        "fastest per token count, of fused / unfused / SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1 / eager: "
        "1: CUDA graphs off (fusion off) (PCIe-IPC not measured; eager 3.0 µs); "
        "128: fusion on (PCIe-IPC not measured; eager not measured)"
    ) in " ".join(buffer.getvalue().split())


def test_a_saved_result_is_read_from_its_variants_or_from_its_schema_2_fields() -> None:
    data = json.loads(json.dumps(render.to_json(result(baseline=SGLANG))))
    before = json.loads(json.dumps(data))  # bench-last.json as saved before the table of variants
    for row in before["rows"]:
        del row["variants"]
    assert saved.crossover_of(before) == saved.crossover_of(data)
    for row in data["rows"]:  # where a row has variants, they are what is read
        row["fused"] = row["unfused"] = None
    assert saved.crossover_of(data) == saved.crossover_of(before)
