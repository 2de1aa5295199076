"""From measured rows to one line of advice a person can act on.

A token count is "faster" or "slower" when fused and unfused differ by more than
``NOISE_PCT`` (median against median, each the slowest rank's); closer than that they are
"even".  A wrong fused result outranks every timing: then the advice is to keep fusion off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

from sm120patch.output.words import counted
from sm120patch.patcher.exports import AUTO_ENABLE_OFF

NOISE_PCT = 3.0
#: The one TP at which the patched auto-enable turns fusion on by itself on SM12x unless
#: ``apply --auto-enable-tp any`` was asked (server-args-auto-enable).
AUTO_ENABLE_TP = 2
KEEP_OFF_DEFAULT = f"`--enforce-disable-flashinfer-allreduce-fusion` / {AUTO_ENABLE_OFF}"


class Kind(str, Enum):
    PAYS = "pays"  # faster somewhere, slower nowhere
    COSTS = "costs"  # slower somewhere, faster nowhere
    EVEN = "even"  # within the noise everywhere
    MIXED = "mixed"  # faster at some sizes, slower at others
    WRONG = "wrong"  # a fused result did not match the fp32 reference


class Compare(str, Enum):
    FASTER = "faster"
    SLOWER = "slower"
    EVEN = "even"


def compare(delta_pct: float, noise_pct: float = NOISE_PCT) -> Compare:
    """Fused (or fusion on) against unfused: negative ``delta_pct`` is faster; within
    ``noise_pct`` either way is even."""
    if delta_pct <= -noise_pct:
        return Compare.FASTER
    if delta_pct >= noise_pct:
        return Compare.SLOWER
    return Compare.EVEN


@dataclass(frozen=True)
class Point:
    """What the verdict needs of one row."""

    tokens: int
    fused_us: float
    unfused_us: float
    ok: bool

    @property
    def delta_pct(self) -> float:
        """Fused against unfused: negative is faster."""
        return (self.fused_us - self.unfused_us) / self.unfused_us * 100.0

    @property
    def compare(self) -> Compare:
        return compare(self.delta_pct)


@dataclass(frozen=True)
class Verdict:
    kind: Kind
    advice: str
    crossover: int | None  # the token count from which fusion stops paying (or starts)
    indicative: tuple[str, ...] = ()  # why the baseline was not sglang's own code

    @property
    def text(self) -> str:
        """The advice, prefixed with why it is only indicative where it is."""
        if not self.indicative:
            return self.advice
        return f"indicative only ({'; '.join(self.indicative)}): {self.advice}"


def _span(points: Sequence[Point]) -> str:
    low, high = points[0].tokens, points[-1].tokens
    return counted(low, "token") if low == high else f"{low} to {high} tokens"


def _pct(points: Sequence[Point]) -> str:
    gains = sorted(abs(p.delta_pct) for p in points)
    low, high = gains[0], gains[-1]
    return f"{low:.0f} %" if round(low) == round(high) else f"{low:.0f} % to {high:.0f} %"


def _crossover(points: Sequence[Point]) -> tuple[int, Compare] | None:
    """(first token count of the upper run, what it is) when the sizes split in two runs:
    one side never slower, the other never faster; None when they interleave."""
    for i in range(1, len(points)):
        below, above = points[:i], points[i:]
        for low, high in ((Compare.FASTER, Compare.SLOWER), (Compare.SLOWER, Compare.FASTER)):
            if (
                above[0].compare is high
                and any(p.compare is low for p in below)
                and all(p.compare is not high for p in below)
                and all(p.compare is not low for p in above)
            ):
                return above[0].tokens, high
    return None


def judge(
    points: Sequence[Point], tp: int, keep_off: str = KEEP_OFF_DEFAULT, indicative: Sequence[str] = ()
) -> Verdict:
    """The verdict over ``points`` (any order) at ``tp``; ``keep_off`` names how this release
    turns fusion off; ``indicative`` says why the unfused side was not sglang's own code."""
    verdict = _judge(sorted(points, key=lambda p: p.tokens), tp, keep_off)
    return replace(verdict, indicative=tuple(indicative)) if indicative else verdict


def _judge(points: Sequence[Point], tp: int, keep_off: str) -> Verdict:
    wrong = [p for p in points if not p.ok]
    if wrong:
        sizes = ", ".join(str(p.tokens) for p in wrong)
        return Verdict(
            Kind.WRONG,
            f"the fused kernel gave wrong results at {sizes} tokens on these GPUs: keep fusion off ({keep_off}) "
            "and upgrade FlashInfer",
            None,
        )
    faster = [p for p in points if p.compare is Compare.FASTER]
    slower = [p for p in points if p.compare is Compare.SLOWER]
    if faster and not slower:
        advice = f"fusion pays here at TP {tp}: {_pct(faster)} faster at {_span(faster)}: leave it on"
        if tp > AUTO_ENABLE_TP:
            advice += f"; `sm120patch apply --auto-enable-tp any` lets sglang turn it on by itself at TP {tp}"
        return Verdict(Kind.PAYS, advice, None)
    if slower and not faster:
        return Verdict(
            Kind.COSTS,
            f"fusion is slower at TP {tp} ({_pct(slower)} at {_span(slower)}): keep it off ({keep_off})",
            None,
        )
    if not faster:
        return Verdict(
            Kind.EVEN,
            f"fusion makes no measurable difference at TP {tp} (within ±{NOISE_PCT:.0f} % at every size): either way",
            None,
        )
    split = _crossover(points)
    if split and split[1] is Compare.SLOWER:
        tokens = split[0]
        return Verdict(
            Kind.MIXED,
            f"fusion is faster below {tokens} tokens and slower from {tokens} tokens at TP {tp}: it pays for "
            f"decode-sized batches; keep it off ({keep_off}) where batches of {tokens}+ tokens dominate",
            tokens,
        )
    if split:
        tokens = split[0]
        return Verdict(
            Kind.MIXED,
            f"fusion is slower below {tokens} tokens and faster from {tokens} tokens at TP {tp}: small decode "
            f"batches lose; keep it off ({keep_off}) for latency-bound serving",
            tokens,
        )
    return Verdict(
        Kind.MIXED,
        f"fusion is faster at {', '.join(str(p.tokens) for p in faster)} tokens and slower at "
        f"{', '.join(str(p.tokens) for p in slower)} tokens at TP {tp}: no clear crossover; measure your "
        "workload end to end before keeping it",
        None,
    )


class Reach(str, Enum):
    """How far fusion wins, for ``apply --fuse-up-to measured``."""

    UP_TO = "up-to"  # wins at every size up to ``tokens``, not at the next one
    NEVER = "never"  # does not win at the smallest size (or a fused result was wrong)
    ALWAYS = "always"  # wins at every measured size


@dataclass(frozen=True)
class Crossover:
    """The largest measured token count up to which fusion wins at every point (each beyond
    ``noise_pct``), measured ``against`` the same unfused side as the verdict; ``indicative``
    says why that side was not sglang's own code (then the crossover is not sglang's either)."""

    reach: Reach
    tokens: int | None  # UP_TO: the limit; ALWAYS: the largest size measured
    margin_pct: float | None  # fused against the other side at ``tokens``
    next_tokens: int | None = None  # UP_TO: the first size where fusion does not win
    next_pct: float | None = None
    against: str = "unfused"
    noise_pct: float = NOISE_PCT
    wrong: bool = False  # a fused result did not match the reference: no size is to be trusted
    indicative: tuple[str, ...] = ()  # why the unfused side was not sglang's own code

    @property
    def limit(self) -> int | None:
        """The fusion token limit to set: only where fusion stops winning inside the measured sizes."""
        return self.tokens if self.reach is Reach.UP_TO else None

    @property
    def text(self) -> str:
        """What the crossover is, prefixed with why it is only indicative where it is."""
        if not self.indicative:
            return self._text
        return f"indicative only ({'; '.join(self.indicative)}): {self._text}"

    @property
    def _text(self) -> str:
        noise = f"fixed ±{self.noise_pct:.0f} % threshold"  # not the run's own spread
        if self.wrong:
            return "crossover: none: a fused result was wrong, so fusion wins nowhere; keep fusion off"
        if self.reach is Reach.NEVER:
            return (
                f"crossover: fusion does not win even at the smallest size against {self.against}: "
                "keep fusion off (--fuse-up-to measured refuses this result)"
            )
        if self.reach is Reach.ALWAYS:
            return (
                f"crossover: none measured: fusion wins at every size up to {self.tokens} tokens against "
                f"{self.against} ({self.margin_pct:+.0f} % there, beyond the {noise}): keep sglang's limit"
            )
        return (
            f"crossover: fusion wins at every size up to {self.tokens} tokens against {self.against} "
            f"({self.margin_pct:+.0f} % there, beyond the {noise}), "
            f"not at {self.next_tokens} ({self.next_pct:+.1f} %): "
            + (
                "`sm120patch apply --fuse-up-to measured` refuses it: measure where sglang imports"
                if self.indicative
                else f"`sm120patch apply --fuse-up-to measured` sets sglang's fusion token limit to {self.tokens}"
            )
        )


def crossover(points: Sequence[Point], against: str = "unfused", noise_pct: float = NOISE_PCT) -> Crossover:
    """Where fusion stops winning over ``points`` (any order; ``unfused_us`` is the side named
    ``against``)."""
    ordered = sorted(points, key=lambda p: p.tokens)
    if any(not p.ok for p in ordered):  # a wrong fused result: the kernel is not to be trusted at any size
        return Crossover(Reach.NEVER, None, None, against=against, noise_pct=noise_pct, wrong=True)
    last: Point | None = None
    for point in ordered:
        if compare(point.delta_pct, noise_pct) is not Compare.FASTER:
            if last is None:
                return Crossover(Reach.NEVER, None, None, point.tokens, point.delta_pct, against, noise_pct)
            return Crossover(
                Reach.UP_TO, last.tokens, last.delta_pct, point.tokens, point.delta_pct, against, noise_pct
            )
        last = point
    if last is None:
        return Crossover(Reach.NEVER, None, None, against=against, noise_pct=noise_pct)
    return Crossover(Reach.ALWAYS, last.tokens, last.delta_pct, against=against, noise_pct=noise_pct)
