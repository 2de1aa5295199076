"""doctor's word on sglang's fusion token limit: what it is, whether a measurement set it, and
whether that measurement is still of this host (its name, release, TP and GPUs)."""

from __future__ import annotations

from collections.abc import Mapping

from sm120patch.doctor.findings import HostFinding, Severity
from sm120patch.patcher.exports import MEASURED, PATCH_ID, SGLANG, State, StateDir, mismatch, recorded, sglang_limit
from sm120patch.runner.gpus import Gpu
from sm120patch.sglang.tree import SglangTree

BENCH_THEN_APPLY = "`sm120patch bench kernel`, then `sm120patch apply --fuse-up-to measured`"


def token_limit(
    tree: SglangTree, states: Mapping[str, State], gpus: tuple[Gpu, ...], tp: int | None
) -> list[HostFinding]:
    """One finding: the limit in force and where it came from (none where the release has no limit)."""
    state = states.get(PATCH_ID)
    if state not in (State.APPLIED, State.NOT_NEEDED, State.PENDING):
        return []
    source = f"sm120patch verify ({tree.package_dir})"
    asked = recorded(StateDir(tree.package_dir).load(), tree)
    if asked is None or asked.source == SGLANG:  # `--fuse-up-to sglang`: as if none was ever asked
        own, now = sglang_limit(tree), sglang_limit(tree, shipped=False)
        if own is None or now is None:
            return []
        said = (
            f"sglang's own, {own} tokens (not measured here)"
            if now == own
            else f"{now} tokens in force, with no apply recorded that set it (sglang's own: {own})"
        )
        return [
            HostFinding(
                "token-limit",
                Severity.INFO,
                f"fusion token limit: {said}",
                f"fusion pays at decode sizes and may lose at prefill sizes: {BENCH_THEN_APPLY} keeps it "
                "only where it wins on this host",
                source,
            )
        ]
    if state is not State.APPLIED:
        return [
            HostFinding(
                "token-limit",
                Severity.WARNING,
                f"fusion token limit: the last apply asked for {asked.describe()}, but the code is {state.value}",
                "run `sm120patch apply` to write it again",
                source,
            )
        ]
    if asked.source != MEASURED:
        return [HostFinding("token-limit", Severity.OK, f"fusion token limit: {asked.describe()}", "", source)]
    facts = {"host": asked.host, "release": asked.release, "tp": asked.tp, "gpus": list(asked.gpus)}
    names = [g.name for g in gpus] if gpus else None
    why = mismatch(tree, facts, tp, names)
    if why:
        return [
            HostFinding(
                "token-limit",
                Severity.WARNING,
                f"fusion token limit: {asked.describe()}; the bench result {why}",
                f"measure again here: {BENCH_THEN_APPLY}",
                source,
            )
        ]
    return [
        HostFinding(
            "token-limit",
            Severity.OK,
            f"fusion token limit: {asked.describe()}; the measurement matches this host{_unchecked(tp, names)}",
            "",
            source,
        )
    ]


def _unchecked(tp: int | None, gpus: list[str] | None) -> str:
    """What doctor could not compare with the measurement, as a clause (empty: nothing)."""
    left = [
        *(["the TP (doctor --tp N compares it)"] if tp is None else []),
        *(["the GPUs (nvidia-smi did not answer)"] if gpus is None else []),
    ]
    return f" (not compared: {', '.join(left)})" if left else ""
