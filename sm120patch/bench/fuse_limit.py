"""``apply --fuse-up-to N|measured|sglang``: the limit asked for, checked before anything is
planned.

A number must not be above sglang's own limit (the workspace is sized for it); ``measured``
takes the crossover of the bench result saved in this tree, and only while that result is of
this host, this release as installed now, these GPUs and this TP (``--tp``; without it, only
where the result's TP is the number of GPUs CUDA shows here); ``sglang`` puts the release's
own limit back, without a revert of the other patches.
"""

from __future__ import annotations

from sm120patch.bench.kernel import saved
from sm120patch.bench.kernel.verdict import Reach
from sm120patch.errors import EnvironmentProblem
from sm120patch.patcher.exports import (
    GIVEN,
    LIMIT_NAME,
    MEASURED,
    SGLANG,
    LimitAsk,
    limit_in_force,
    mismatch,
    sglang_limit,
    sglang_sites,
)
from sm120patch.sglang.tree import SglangTree

GPU_TIMEOUT_S = 10.0


def parse(value: str) -> int | str:
    """``measured``, ``sglang`` or a token count of at least 1; ValueError for anything else."""
    word = value.strip().lower()
    if word in (MEASURED, SGLANG):
        return word
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


def asked_limit(tree: SglangTree, value: int | str | None, tp: int | None) -> LimitAsk | None:
    """What ``apply --fuse-up-to VALUE [--tp TP]`` asks for (None: leave the limit as it is)."""
    if value is None:
        if tp is not None:
            raise EnvironmentProblem(
                "--tp is for --fuse-up-to measured (the TP the saved bench result must have)", code="usage"
            )
        return None
    if tp is not None and value != MEASURED:
        raise EnvironmentProblem(f"--tp is for --fuse-up-to measured, not --fuse-up-to {value}", code="usage")
    return resolve(tree, value, tp)


def resolve(tree: SglangTree, value: int | str, tp: int | None, own: int | None = None) -> LimitAsk:
    """The limit ``--fuse-up-to`` asks for, with its source; EnvironmentProblem (exit 2,
    nothing written) for a limit above sglang's (``own``, read here where not given) or a
    saved result that does not fit here."""
    own = sglang_limit(tree) if own is None else own
    if value == SGLANG:
        if own is None:
            raise EnvironmentProblem(
                f"--fuse-up-to sglang: sglang {tree.version} has no fusion token limit of its own", code="usage"
            )
        return LimitAsk(own, SGLANG)
    if value == MEASURED:
        ask = _measured(tree, tp, own)
    else:
        assert isinstance(value, int)
        ask = LimitAsk(value, GIVEN)
    if own is not None and ask.limit > own:
        raise EnvironmentProblem(
            f"--fuse-up-to {ask.limit} is above sglang {tree.version}'s own limit of {own} tokens: sglang sizes "
            f"FlashInfer's workspace for {own} tokens (max_token_num), so a larger batch would overrun it or "
            "stop at sglang's assert; the limit only goes down",
            code="usage",
        )
    return ask


def _measured(tree: SglangTree, tp: int | None, own: int | None) -> LimitAsk:
    data = saved.load(tree)
    if data is None:
        raise EnvironmentProblem(
            f"--fuse-up-to measured: no bench result is saved for {tree.package_dir}; "
            "run `sm120patch bench kernel` first",
            code="no-measurement",
        )
    here = _gpus()
    why = mismatch(tree, data["saved"], tp, here)
    if why:
        raise EnvironmentProblem(
            f"--fuse-up-to measured: the saved bench result {why}; run `sm120patch bench kernel` again",
            code="no-measurement",
        )
    then = data["saved"].get("tp")
    if tp is None and (here is None or then != len(here)):
        shown = "nvidia-smi did not answer" if here is None else f"this host shows {len(here)} GPUs"
        raise EnvironmentProblem(
            f"--fuse-up-to measured: the saved bench result was measured at TP {then} and {shown}, so the TP "
            f"sglang serves at cannot be told; add --tp with it (--tp {then} if that is it)",
            code="no-measurement",
        )
    found = saved.crossover_of(data)
    facts = data["saved"]
    if found.indicative:
        raise EnvironmentProblem(
            "--fuse-up-to measured: the saved bench result is indicative only, its unfused side ran stand-ins "
            f"({'; '.join(found.indicative)}), so its crossover is not sglang's; run `sm120patch bench kernel` where "
            "sglang imports (the baseline is then sglang's own code), or give the limit as --fuse-up-to N",
            code="no-measurement",
        )
    if found.reach is Reach.NEVER:
        raise EnvironmentProblem(
            f"--fuse-up-to measured: fusion did not win at any size in the saved bench result ({found.text}); "
            "keep fusion off instead",
            code="no-measurement",
        )
    limit = found.limit if found.reach is Reach.UP_TO else own
    if limit is None:
        raise EnvironmentProblem(
            f"--fuse-up-to measured: fusion won at every measured size and sglang {tree.version} has no "
            "limit of its own to keep",
            code="no-measurement",
        )
    return LimitAsk(
        limit,
        MEASURED,
        facts.get("host"),
        facts.get("tp"),
        tuple(facts.get("gpus") or ()),
        str(facts.get("date", ""))[:10] or None,
        facts.get("release"),
        found.against,
    )  # indicative stays False: a result against stand-ins is refused above


def _gpus() -> list[str] | None:
    """This host's GPUs that CUDA shows (``CUDA_VISIBLE_DEVICES``) as nvidia-smi names them, or
    None where it does not answer or the variable cannot be read here (an image build, a CPU
    host: then the GPU set is not compared, and ``measured`` needs ``--tp``)."""
    import os

    from sm120patch.runner import gpus, visibility

    seen = gpus.from_nvidia_smi(GPU_TIMEOUT_S)
    if not seen.answered:
        return None
    # CUDA_DEVICE_ORDER only changes select's sentence, not the GPUs it picks: not read here.
    shown = visibility.select(os.environ.get(visibility.VARIABLE), seen.gpus).gpus
    return None if shown is None else [g.name for g in shown]


def server_limits(tree: SglangTree, value: int | str, tp: int | None) -> tuple[int, int]:
    """``bench server --fuse-up-to VALUE``: (the limit of the third setting, sglang's own, which
    the "on" setting runs with).  The hook sets the module constant in sglang's processes, so
    a release whose gate also compares a literal (0.5.4 - 0.5.7) is refused."""
    if value == SGLANG:
        raise EnvironmentProblem(
            "bench server --fuse-up-to sglang is the fusion-on setting itself: give N or measured", code="usage"
        )
    sites = sglang_sites(tree)
    if not sites:
        raise EnvironmentProblem(
            f"--fuse-up-to: sglang {tree.version} has no fusion token limit to lower", code="usage"
        )
    literals = [site.where for site in sites if site.where != LIMIT_NAME]
    if literals:
        raise EnvironmentProblem(
            f"bench server --fuse-up-to sets {LIMIT_NAME} in sglang's processes, but sglang {tree.version}'s gate "
            f"also compares a number ({literals[0]}): `sm120patch apply --fuse-up-to measured`, then a plain "
            "`sm120patch bench server`, compare the limits there",
            code="usage",
        )
    own = limit_in_force(sites)
    return resolve(tree, value, tp, own).limit, own
