"""bench's last result, kept in the tree's state folder for ``apply --fuse-up-to measured``.

``<sglang>/.sm120patch/bench-last.json`` is the bench JSON object (``sm120patch-bench/2``)
with a ``saved`` object: the host, TP, GPUs, dtype, hidden size, FlashInfer version and
release it was measured on, when, and the release files' RECORD hash of the gate's module.  A full ``revert`` removes
it with the rest of the state (nothing of this tool is left in the tree); the measurement is
for this release on this host, and ``bench kernel`` makes a new one in a minute.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from sm120patch.bench.kernel.measure import FUSED, UNFUSED, variants
from sm120patch.bench.kernel.verdict import NOISE_PCT, Crossover, Point, crossover
from sm120patch.errors import EnvironmentProblem
from sm120patch.patcher.exports import BENCH_RESULT, StateDir, gate_rel
from sm120patch.sglang.tree import SglangTree

SGLANGS = "sglang's unfused path"
STAND_INS = "the stand-in unfused path"
#: Why a result without a ``baseline.why`` (schema 1) is indicative.
NOT_SGLANGS = "stand-ins: sglang's code did not run here"


def stand_ins(data: Mapping[str, Any]) -> bool:
    """Whether the unfused side was not sglang's own code (schema 1: ``baseline_is_sglangs``)."""
    baseline = data.get("baseline")
    if isinstance(baseline, Mapping):
        return bool(baseline.get("indicative"))
    return not data.get("baseline_is_sglangs", False)


def crossover_of(data: Mapping[str, Any]) -> Crossover:
    """The crossover of a bench JSON object (this tool's, recorded or fresh), against the same
    unfused side as the verdict: indicative, as the verdict is, where that side was stand-ins."""
    indicative: tuple[str, ...] = ()
    if stand_ins(data):
        baseline = data.get("baseline")
        why = baseline.get("why") if isinstance(baseline, Mapping) else None
        indicative = tuple(str(w) for w in why) if isinstance(why, list) and why else (NOT_SGLANGS,)
    try:
        points: Sequence[Point] = [
            Point(int(r["tokens"]), _median(r, FUSED), _median(r, UNFUSED), bool(r["ok"])) for r in data["rows"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise EnvironmentProblem(f"not a bench result of this tool (its rows lack {exc})") from exc
    found = crossover(points, STAND_INS if indicative else SGLANGS, NOISE_PCT)
    return replace(found, indicative=indicative)


def _median(row: Mapping[str, Any], name: str) -> float:
    """A variant's median in a saved row: under ``variants`` where the row has them (since the
    table of variants), else its sm120patch-bench/2 field (results saved before)."""
    measured = row.get("variants")
    if isinstance(measured, Mapping) and name in measured:
        return float(measured[name]["median_us"])
    field = next((v.json_field for v in variants() if v.name == name), None) or name
    return float(row[field]["median_us"])


def crossover_json(found: Crossover) -> dict[str, Any]:
    return {
        "reach": found.reach.value,
        "tokens": found.tokens,
        "limit": found.limit,
        "margin_pct": None if found.margin_pct is None else round(found.margin_pct, 2),
        "next_tokens": found.next_tokens,
        "next_pct": None if found.next_pct is None else round(found.next_pct, 2),
        "against": found.against,
        "noise_pct": found.noise_pct,
        "wrong": found.wrong,
        "indicative": bool(found.indicative),
        "text": found.text,
    }


def identity(tree: SglangTree | None, data: Mapping[str, Any]) -> dict[str, Any]:
    """What a saved result was measured on: this host, the result's TP, GPUs, dtype and
    hidden size, and the release (with its gate module's RECORD hash)."""
    gpus = [str(g.get("name")) for g in data.get("gpus") or []]
    return {
        "host": socket.gethostname(),
        "tp": data.get("tp"),
        "gpus": gpus,
        "dtype": data.get("dtype"),
        "hidden": data.get("hidden"),
        "flashinfer": (data.get("versions") or {}).get("flashinfer"),  # the one bench's interpreter ran
        "release": tree.version if tree else None,
        "gate_record_sha256": tree.record.sha256(gate_rel(tree)) if tree else None,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "epoch": time.time(),
    }


def path(tree: SglangTree) -> Path:
    return StateDir(tree.package_dir).root / BENCH_RESULT


def save(tree: SglangTree, data: dict[str, Any]) -> str | None:
    """Keep ``data`` (bench's JSON object) as this tree's last result; the sentence saying
    why it could not be kept, or None."""
    state = StateDir(tree.package_dir)
    kept = dict(data, saved=identity(tree, data))
    try:
        state.write_json(path(tree), kept)
    except OSError as exc:
        return f"the result was not kept for `apply --fuse-up-to measured` ({exc.strerror}: {state.root})"
    return None


def load(tree: SglangTree) -> dict[str, Any] | None:
    where = path(tree)
    try:
        data = json.loads(where.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise EnvironmentProblem(
            f"{where}: cannot read the saved bench result ({exc}); run `sm120patch bench kernel` again",
            code="no-measurement",
        ) from exc
    if not isinstance(data, dict) or not isinstance(data.get("saved"), dict):
        raise EnvironmentProblem(
            f"{where} is not a bench result this tool saved; run `sm120patch bench kernel` again", code="no-measurement"
        )
    return data
