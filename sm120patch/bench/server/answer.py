"""The answer of ``bench server``: per part of the work (decode, prefill), the fastest
configuration whose answers agree with sglang's default, and the exact way to launch it.

A part's figure for a configuration is the geometric mean, over the batch sizes every run
measured, of its median latency over the default's: one number, each batch size weighing the
same.  A configuration wins only by more than the noise (the larger spread of its repeats and
the default's, at least ``NOISE_FLOOR_PCT``; ``SINGLE_RUN_PCT`` with one run each), else sglang's
default stands.  A configuration with wrong answers (``answers``) is never the answer.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sm120patch.bench.server.answers import Check, Status
from sm120patch.bench.server.configs import DEFAULT, Config, fusion_args
from sm120patch.bench.server.flags import Flags
from sm120patch.bench.server.verdict import NOISE_FLOOR_PCT, SINGLE_RUN_PCT, spread_pct
from sm120patch.sglang.options import HATCH

PARTS = ("decode", "prefill")


@dataclass(frozen=True)
class Launch:
    env: dict[str, str]
    server_args: tuple[str, ...]
    apply: str | None  # the sm120patch command the tree needs first (the limit), None: as it is

    @property
    def text(self) -> str:
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        line = " ".join(part for part in (env, "python -m sglang.launch_server ...", *self.server_args) if part)
        return f"`{self.apply}`, then `{line}`" if self.apply else f"`{line}`"


@dataclass(frozen=True)
class Part:
    part: str
    config: str | None  # the answer; None: no configuration measured in every run
    vs_default_pct: float | None  # its figure against the default, negative is faster
    noise_pct: float
    figures: dict[str, float] = field(default_factory=dict)  # each measured config: its mean ratio to the default
    winners: dict[int, str] = field(default_factory=dict)  # batch size: the fastest agreeing config there


@dataclass(frozen=True)
class Answer:
    parts: list[Part]
    launches: dict[str, Launch]  # by config name, for each part's answer
    sentence: str
    wrong: list[str]  # the configurations whose answers are wrong, never the answer


def launch(config: Config, flags: Flags, fuse_up_to: int | None) -> Launch:
    apply = f"sm120patch apply --fuse-up-to {fuse_up_to}" if config.fusion == "limit" else None
    return Launch(dict(config.env), fusion_args(config, flags), apply)


def _noise(mine: Sequence[float], theirs: Sequence[float]) -> float:
    spreads = [s for s in (spread_pct(mine), spread_pct(theirs)) if s is not None]
    return max([NOISE_FLOOR_PCT, *spreads]) if spreads else SINGLE_RUN_PCT


def decide(
    part: str, figures: Mapping[str, Mapping[int, Sequence[float]]], eligible: Sequence[str], sizes: Sequence[int]
) -> Part:
    """``figures``: config name -> batch size -> its runs' latencies for this part."""
    base = figures.get(DEFAULT, {})
    measured = [s for s in sizes if base.get(s)]
    # a configuration missing a batch size the default measured (a failed run) is left out
    figures = {c: by_size for c, by_size in figures.items() if all(by_size.get(s) for s in measured)}
    if not measured:
        return Part(part, None, None, SINGLE_RUN_PCT)
    ratio: dict[str, float] = {}
    noise: dict[str, float] = {}
    for name, by_size in figures.items():
        logs = [math.log(statistics.median(by_size[s]) / statistics.median(base[s])) for s in measured]
        ratio[name] = math.exp(statistics.fmean(logs))
        noise[name] = max(_noise(by_size[s], base[s]) for s in measured)
    candidates = [c for c in figures if c in eligible]
    # none agrees (the default's answers wrong, the rest wrong or unchecked): no winner at any size
    winners = {s: min(candidates, key=lambda c: statistics.median(figures[c][s])) for s in measured if candidates}
    best = min(candidates, key=lambda c: ratio[c]) if candidates else None
    if best is not None and (1 - ratio[best]) * 100 <= noise[best]:
        best = DEFAULT if DEFAULT in eligible else best  # within the noise: no reason to change sglang's default
    pct = None if best is None else round((ratio[best] - 1) * 100, 2)
    return Part(
        part,
        best,
        pct,
        noise[best] if best else SINGLE_RUN_PCT,
        {c: round(r, 4) for c, r in ratio.items()},
        winners,
    )


def _say(part: Part, by_name: Mapping[str, Config], launches: Mapping[str, Launch], tp: int) -> str:
    if part.config is None:
        return f"{part.part}: no configuration whose answers agree was measured in every run"
    if part.config == DEFAULT:
        return (
            f"{part.part} at TP {tp}: sglang's default is fastest (or nothing beats it beyond ±{part.noise_pct:.1f} %)"
        )
    return (
        f"{part.part} at TP {tp}: {part.config} is fastest, {abs(part.vs_default_pct or 0):.1f} % faster than "
        f"sglang's default (noise ±{part.noise_pct:.1f} %): {by_name[part.config].sentence}; launch with "
        f"{launches[part.config].text}"
    )


def _fusion_loses(part: Part, by_name: Mapping[str, Config], flags: Flags, eligible: Sequence[str]) -> str | None:
    """The plain line where PCIe-IPC without fusion beats every fused configuration that agrees."""
    answer = by_name.get(part.config or "")
    fused = [c for c in part.figures if by_name[c].fusion != "off" and c in eligible]
    if answer is None or not answer.pcie_ipc or answer.fusion != "off" or not fused:
        return None
    hatch = f"launch with `{HATCH}`" if HATCH in flags.off else f"this release has no {HATCH} (0.5.10+), so revert"
    return (
        f"fusion loses to PCIe-IPC in {part.part} ({', '.join(fused)} slower than {answer.name}): "
        f"`sm120patch revert` is the right move (or keep the patches and {hatch})"
    )


def answer(
    chosen: Sequence[Config],
    checks: Mapping[str, Check],
    decode: Mapping[str, Mapping[int, Sequence[float]]],
    prefill: Mapping[str, Mapping[int, Sequence[float]]],
    sizes: Sequence[int],
    flags: Flags,
    fuse_up_to: int | None,
    tp: int,
) -> Answer:
    by_name = {c.name: c for c in chosen}
    eligible = [c.name for c in chosen if checks[c.name].eligible]
    parts = [decide("decode", decode, eligible, sizes)]
    if any(prefill.values()):
        parts.append(decide("prefill", prefill, eligible, sizes))
    launches = {p.config: launch(by_name[p.config], flags, fuse_up_to) for p in parts if p.config is not None}
    lines = [_say(p, by_name, launches, tp) for p in parts]
    lines += [line for p in parts if (line := _fusion_loses(p, by_name, flags, eligible))]
    wrong = [c.name for c in chosen if checks[c.name].status.wrong]
    if wrong:  # each one's why is in its check
        lines.append(f"never the answer, whatever its speed (wrong answers): {', '.join(wrong)}")
    unchecked = [c.name for c in chosen if checks[c.name].status is Status.UNCHECKED]
    if unchecked:  # not proven right: not the answer either, and said, so "default" is not read as measured
        lines.append(f"not the answer, their answers could not be checked: {', '.join(unchecked)}")
    return Answer(parts, launches, "; ".join(lines), wrong)
