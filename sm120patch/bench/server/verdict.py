"""From decode latencies, off against on, to one line of advice with this release's flags.

Per batch size: the median over the repeats of each mode's median decode step (ms per output
token of each sequence, as bench_one_batch prints it) and tokens/s.  The noise is what the
repeats themselves disagree by: the larger spread (max - min over the median, in %) of the two
modes, never less than ``NOISE_FLOOR_PCT``; with one run per mode it is not measured and
``SINGLE_RUN_PCT`` stands in for it.  A difference within the noise is "even".
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from sm120patch.bench.kernel.verdict import Compare, compare
from sm120patch.bench.server.flags import Flags

NOISE_FLOOR_PCT = 1.0
SINGLE_RUN_PCT = 3.0


class Kind(str, Enum):
    PAYS = "pays"
    COSTS = "costs"
    EVEN = "even"
    MIXED = "mixed"
    NONE = "none"  # no verdict: a run did not do what it says, or failed


def spread_pct(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    return (max(values) - min(values)) / statistics.median(values) * 100.0


@dataclass(frozen=True)
class Row:
    batch_size: int
    off_ms: list[float]  # median decode step of each "off" run
    on_ms: list[float]
    limit_ms: list[float] = field(default_factory=list)  # of each run with --fuse-up-to's limit
    # each setting's prefill latencies (s): shown beside the three settings, not judged
    prefill_s: dict[str, list[float]] = field(default_factory=dict, compare=False)

    @property
    def limit(self) -> float | None:
        return statistics.median(self.limit_ms) if self.limit_ms else None

    def prefill(self, mode: str) -> float | None:
        values = self.prefill_s.get(mode)
        return statistics.median(values) if values else None

    @property
    def off(self) -> float:
        return statistics.median(self.off_ms)

    @property
    def on(self) -> float:
        return statistics.median(self.on_ms)

    @property
    def off_tps(self) -> float:
        return self.batch_size / self.off * 1000.0

    @property
    def on_tps(self) -> float:
        return self.batch_size / self.on * 1000.0

    @property
    def delta_pct(self) -> float:
        """On against off, decode time per token: negative is faster."""
        return (self.on - self.off) / self.off * 100.0

    @property
    def noise_pct(self) -> float:
        spreads = [s for s in (spread_pct(self.off_ms), spread_pct(self.on_ms)) if s is not None]
        return max([NOISE_FLOOR_PCT, *spreads]) if spreads else SINGLE_RUN_PCT

    @property
    def measured_noise(self) -> bool:
        return len(self.off_ms) > 1 and len(self.on_ms) > 1

    @property
    def compare(self) -> Compare:
        return compare(self.delta_pct, self.noise_pct)


@dataclass(frozen=True)
class Verdict:
    kind: Kind
    advice: str


def _sizes(rows: Sequence[Row]) -> str:
    sizes = [r.batch_size for r in rows]
    return f"batch {sizes[0]}" if len(sizes) == 1 else "batch " + ", ".join(map(str, sizes))


def _pct(rows: Sequence[Row]) -> str:
    values = sorted(abs(r.delta_pct) for r in rows)
    low, high = values[0], values[-1]
    return f"{low:.1f} %" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f} % to {high:.1f} %"


def judge(rows: Sequence[Row], tp: int, flags: Flags) -> Verdict:
    rows = sorted(rows, key=lambda r: r.batch_size)
    faster = [r for r in rows if r.compare is Compare.FASTER]
    slower = [r for r in rows if r.compare is Compare.SLOWER]
    if faster and not slower:
        return Verdict(
            Kind.PAYS,
            f"fusion pays in sglang's own decode at TP {tp}: {_pct(faster)} faster per token at {_sizes(faster)}: "
            f"{flags.keep_on}",
        )
    if slower and not faster:
        return Verdict(
            Kind.COSTS,
            f"fusion is slower in sglang's own decode at TP {tp} ({_pct(slower)} at {_sizes(slower)}): keep it off, "
            f"{flags.keep_off}",
        )
    if not faster:
        noise = max(r.noise_pct for r in rows)
        return Verdict(
            Kind.EVEN,
            f"fusion makes no difference beyond the noise (±{noise:.1f} %) in sglang's own decode at TP {tp}: "
            "either way",
        )
    return Verdict(
        Kind.MIXED,
        f"fusion is faster at {_sizes(faster)} and slower at {_sizes(slower)} at TP {tp}: {flags.keep_on} only "
        f"where batches like {faster[0].batch_size} dominate; otherwise {flags.keep_off}",
    )


def no_verdict(reason: str) -> Verdict:
    return Verdict(Kind.NONE, f"no verdict: {reason}")
