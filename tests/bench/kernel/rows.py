"""Rows of the kernel bench as the tests write them: the three variants every run measures."""

from __future__ import annotations

from sm120patch.bench.kernel.measure import ALLREDUCE, FUSED, UNFUSED, Row, Timing


def measured_row(
    tokens: int,
    fused: Timing,
    unfused: Timing,
    allreduce: Timing,
    max_abs_error: dict[str, float],
    tolerance: dict[str, float],
    ok: bool,
    allreduce_name: str = "",
    allreduce_why: str = "",
) -> Row:
    """A row with fused, unfused and the allreduce alone measured, and the unfused path's
    allreduce named (and why it was not sglang's custom allreduce) where given."""
    return Row(
        tokens,
        {FUSED: fused, UNFUSED: unfused, ALLREDUCE: allreduce},
        max_abs_error,
        tolerance,
        ok,
        allreduces={UNFUSED: allreduce_name} if allreduce_name else {},
        why={UNFUSED: allreduce_why} if allreduce_why else {},
    )
