"""Did each configuration compute what sglang's default computes?

Every run answers the same request (numpy seeded by the hook, random weights drawn per
parameter from a fixed seed, greedy sampling), so at one TP the logits of sglang's default and of any other
configuration differ only by the order of the sums in their allreduces.  The hook records, per
run, how many forwards had a NaN or inf anywhere, and the first extend's and first decode's
row 0 (its first values, with the input ids it answered).  A configuration is wrong when any
of its runs had a NaN or inf, or when the cosine of its logits against the default's first run
is under the threshold; wrong can never be the answer, however fast.

The first decode is compared where both runs decoded the same tokens (greedy sampling over
random weights can flip between near-equal logits), else the first extend (the prompt alone).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from sm120patch.bench.server.configs import DEFAULT, Config
from sm120patch.bench.server.counter import Logits
from sm120patch.output.words import counted

#: The lowest cosine of a configuration's logits against sglang's default that still agrees.
#: Calibrated on an H100 with sglang 0.5.13 at TP 1, bundled model (hidden 1024, 2 layers,
#: random weights), one fixed request (docs/bench-server.md, "Calibrating the answer check"):
#: two bf16 default runs gave the same logits (cosine 1.0); the same model in fp16 against
#: bf16, a rounding change in every operation (far more than another summation order of the
#: allreduce), gave 0.972 at the first extend; an unrelated vector (the two runs' first decodes,
#: after greedy picked different tokens) gave -0.06, and a kernel that hands back an unwritten
#: buffer (PDL's early completion, vllm#45448) gives NaN or such a vector.  0.9 lets every
#: rounding-level difference through and no wrong answer: random weights keep the logits near
#: uniform, so a legitimate difference moves them more than it would a trained model's.
COSINE_MIN = 0.9
#: Below the default's own agreement with itself (measured with ``--repeat 2`` or more), by
#: this much, a configuration is not held to more than sglang agrees with itself: two runs of
#: one configuration differ by the same kind of nondeterminism (atomics, NCCL's algorithm) that
#: another summation order adds once more.
SELF_MARGIN = 0.005
STEPS = ("decode", "extend")


class Status(str, Enum):
    REFERENCE = "reference"  # sglang's default, against which the others are checked
    AGREES = "agrees"
    NAN = "nan"  # a NaN or inf in its logits
    DISAGREES = "disagrees"
    UNCHECKED = "unchecked"  # nothing to compare: the hook saw no logits, or other inputs

    @property
    def wrong(self) -> bool:
        return self in (Status.NAN, Status.DISAGREES)


@dataclass(frozen=True)
class Check:
    status: Status
    cosine: float | None  # the lowest over its runs
    step: str | None  # which first step was compared
    nonfinite: int  # forwards with a NaN or inf, over its runs
    why: str  # one sentence

    @property
    def eligible(self) -> bool:
        return self.status in (Status.REFERENCE, Status.AGREES)


def cosine(a: Sequence[float | None], b: Sequence[float | None]) -> float | None:
    """The cosine of two equal-length vectors; None when they cannot be compared (a NaN, a
    different length, a zero vector)."""
    if len(a) != len(b) or not a:
        return None
    if any(x is None for x in a) or any(y is None for y in b):
        return None
    xs = [float(x) for x in a if x is not None]
    ys = [float(y) for y in b if y is not None]
    norm = math.sqrt(sum(x * x for x in xs)) * math.sqrt(sum(y * y for y in ys))
    if not norm:
        return None
    return sum(x * y for x, y in zip(xs, ys, strict=True)) / norm


def compare(one: Logits, reference: Logits) -> tuple[float | None, str | None]:
    """The cosine of ``one``'s first step against ``reference``'s, and the step compared:
    decode where both answered the same inputs, else extend."""
    for step in STEPS:
        mine, theirs = one.first.get(step), reference.first.get(step)
        if not mine or not theirs:
            continue
        same = mine.get("input_ids") == theirs.get("input_ids") and mine.get("shape") == theirs.get("shape")
        if same:
            return cosine(mine.get("head") or [], theirs.get("head") or []), step
    return None, None


def threshold(default_self: float | None) -> float:
    """The threshold this bench uses: ``COSINE_MIN``, lowered to the default's own agreement
    with itself less ``SELF_MARGIN`` where that is lower."""
    if default_self is None:
        return COSINE_MIN
    return min(COSINE_MIN, default_self - SELF_MARGIN)


def likely_cause(config: Config) -> str:
    """The likely reason a configuration's answers are wrong, in one clause."""
    if config.fusion != "off":
        return (
            "likely FlashInfer's fused kernel signalling completion before it writes its output (sglang calls it "
            "with PDL and trigger_completion_at_end=False; FlashInfer's one-shot kernel then lets the next kernel "
            "read an unwritten buffer, vllm#45448), where the fused path ran one-shot (small batches)"
        )
    if config.pcie_ipc:
        return "likely sglang's PCIe-IPC allreduce on this host (its peer copies, or a size it does not fit)"
    return "sglang's own unfused path"


def check(config: Config, runs: Sequence[Logits], reference: Logits | None, limit: float) -> Check:
    """The answers of ``config``'s runs against the default's first run (``reference``)."""
    nonfinite = sum(r.nonfinite for r in runs)
    if nonfinite:
        return Check(
            Status.NAN,
            None,
            None,
            nonfinite,
            f"{counted(nonfinite, 'forward')} gave NaN or inf logits: {likely_cause(config)}",
        )
    if config.name == DEFAULT:
        return Check(Status.REFERENCE, None, None, 0, "sglang's default: the answers the others are checked against")
    if reference is None or not runs:
        return Check(Status.UNCHECKED, None, None, 0, "no logits of sglang's default to compare with")
    compared = [compare(r, reference) for r in runs]
    cosines = [c for c, _ in compared if c is not None]
    if len(cosines) < len(runs):
        return Check(
            Status.UNCHECKED,
            min(cosines) if cosines else None,
            None,
            0,
            "its logits could not be compared with the default's (the hook saw none, or other inputs)",
        )
    low = min(cosines)
    step = compared[cosines.index(low)][1]
    if low < limit:
        return Check(
            Status.DISAGREES,
            low,
            step,
            0,
            f"its first {step}'s logits disagree with sglang's default (cosine {low:.4f} < {limit:.4f}): "
            f"{likely_cause(config)}",
        )
    return Check(Status.AGREES, low, step, 0, f"agrees with sglang's default (cosine {low:.4f} >= {limit:.4f})")


def self_agreement(default_runs: Sequence[Logits]) -> float | None:
    """The default's runs against its first: the lowest cosine, None with fewer than two."""
    if len(default_runs) < 2:
        return None
    found = [compare(r, default_runs[0])[0] for r in default_runs[1:]]
    values = [c for c in found if c is not None]
    return min(values) if len(values) == len(found) else None
