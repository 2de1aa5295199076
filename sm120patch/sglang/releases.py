"""What is known about sglang and FlashInfer releases (read off the released wheels).

The patches find their targets by structure; this module only words the refusals and
the FlashInfer warning, and says which releases the project has run end to end.
"""

from __future__ import annotations

from typing import Any

from packaging.version import InvalidVersion, Version

from sm120patch.sglang import flashinfer as flashinfer_kernel
from sm120patch.sglang import static_names
from sm120patch.sglang.layout import COMM_FUSION
from sm120patch.sglang.tree import SglangTree

FUSION_SINCE = Version("0.4.9")  # FlashInfer allreduce fusion appears
#: The sglang releases sm120patch patches, as ``--version`` says: older ones are refused, newer
#: ones than the last pinned below are checked by structure like any other.
FIRST_SUPPORTED = Version("0.5.4")  # is_sm120_supported appears
FLASHINFER_SM12X = flashinfer_kernel.FIRST_SM12X  # first FlashInfer with an SM12x trtllm allreduce kernel

#: The FlashInfer each sglang release pins (its wheel's requirements).
FLASHINFER_PINS: dict[str, str] = {
    "0.4.6": "0.2.3",
    "0.4.6.post1": "0.2.3",
    "0.4.6.post2": "0.2.5",
    "0.4.6.post3": "0.2.5",
    "0.4.6.post4": "0.2.5",
    "0.4.6.post5": "0.2.5",
    "0.4.7": "0.2.6.post1",
    "0.4.7.post1": "0.2.6.post1",
    "0.4.8": "0.2.6.post1",
    "0.4.8.post1": "0.2.6.post1",
    "0.4.9": "0.2.7.post1",
    "0.4.9.post1": "0.2.7.post1",
    "0.4.9.post2": "0.2.7.post1",
    "0.4.9.post3": "0.2.7.post1",
    "0.4.9.post4": "0.2.9rc1",
    "0.4.9.post5": "0.2.9rc2",
    "0.4.9.post6": "0.2.9rc2",
    "0.4.10": "0.2.9rc2",
    "0.4.10.post1": "0.2.9rc2",
    "0.4.10.post2": "0.2.9rc2",
    "0.5.1": "0.2.11.post3",
    "0.5.1.post1": "0.2.11.post3",
    "0.5.1.post2": "0.2.14.post1",
    "0.5.1.post3": "0.2.14.post1",
    "0.5.2": "0.3.1",
    "0.5.3": "0.4.0rc3",
    "0.5.3.post1": "0.4.0",
    "0.5.3.post2": "0.4.0",
    "0.5.3.post3": "0.4.0",
    "0.5.4": "0.4.1",
    "0.5.4.post1": "0.4.1",
    "0.5.4.post2": "0.4.1",
    "0.5.4.post3": "0.5.0",
    "0.5.5": "0.5.0",
    "0.5.5.post1": "0.5.0",
    "0.5.5.post2": "0.5.0",
    "0.5.5.post3": "0.5.2",
    "0.5.6": "0.5.3",
    "0.5.6.post1": "0.5.3",
    "0.5.6.post2": "0.5.3",
    "0.5.7": "0.5.3",
    "0.5.8": "0.6.1",
    "0.5.8.post1": "0.6.1",
    "0.5.9": "0.6.3",
    "0.5.10": "0.6.7.post2",
    "0.5.10.post1": "0.6.7.post3",
    "0.5.11": "0.6.8.post1",
    "0.5.12": "0.6.11.post1",
    "0.5.12.post1": "0.6.11.post1",
    "0.5.13": "0.6.12",
    "0.5.13.post1": "0.6.12",
    "0.5.14": "0.6.12",
    "0.5.15": "0.6.12",
    "0.5.15.post1": "0.6.12",
    "0.5.16": "0.6.14",
    "0.5.17": "0.6.15.post1",
    "0.5.18": "0.6.17",
    "0.5.19": "0.6.18",
    "0.5.20": "0.6.18",
    "0.5.21": "0.6.18",
    "0.5.22": "0.7.1",
    "0.5.23": "0.7.2",
}


def pin_for(version: str | None) -> str | None:
    """The FlashInfer sglang ``version`` pins (a checkout past a tag: the tag's pin).  The
    table's keys are normalized public versions, so a version that does not parse has none."""
    if not version:
        return None
    try:
        public = Version(version).public
    except InvalidVersion:
        return None
    return FLASHINFER_PINS.get(public)


ALL_RELEASES = tuple(FLASHINFER_PINS)
#: The first sglang whose pinned FlashInfer has the SM12x allreduce kernel.
FIRST_PINNING_SM12X = next(
    v for v in ALL_RELEASES if Version(v) > FUSION_SINCE and flashinfer_kernel.by_version(FLASHINFER_PINS[v])
)
LAST_KNOWN = ALL_RELEASES[-1]  # the newest release run end to end: a new release is one pin row


def refusal(tree: SglangTree) -> str | None:
    """Why this release cannot be patched at all, judged by its code; None if it can."""
    if static_names.defines(tree.package_dir, "sglang.srt.utils", "is_sm120_supported"):
        return None
    release = f"sglang {tree.version}" if tree.version else "this sglang"
    if not tree.exists(COMM_FUSION):
        return (
            f"{release} has no FlashInfer allreduce fusion (it arrived in {FUSION_SINCE}): "
            f"there is nothing to widen. The first release sm120patch supports is {FIRST_SUPPORTED}."
        )
    return (
        f"{release} has no SM12x probe (sglang.srt.utils.is_sm120_supported, added in "
        f"{FIRST_SUPPORTED}), so its fusion gates cannot be widened without adding GPU detection "
        f"to sglang. Upgrade to sglang >= {FIRST_SUPPORTED}."
    )


def flashinfer_warning(
    facts: flashinfer_kernel.FlashInfer, sglang_version: str | None, effect: str | None = None
) -> str | None:
    """A warning when the FlashInfer at hand (else the one sglang pins) cannot run the
    fusion on SM12x; None when it can or nothing is known.  ``effect``: what this release
    does then (``startup_risk.effect_sentence``), where its code says."""
    upgrade = f"Upgrade: `pip install -U 'flashinfer-python>={FLASHINFER_SM12X}'`."
    consequence = (
        f"With fusion on, {effect}."
        if effect
        else "With fusion on, FlashInfer's JIT raises 'No supported CUDA architectures found for major "
        "versions [9, 10]' on SM12x (sglang#15650)."
    )
    if facts.found:
        if facts.sm12x_kernel is not False:
            return None
        name = f"FlashInfer {facts.version}" if facts.version else "the installed FlashInfer"
        return (
            f"{name} does not build the trtllm allreduce for SM12x ({facts.source}); the first "
            f"that does is {FLASHINFER_SM12X} (flashinfer#3903). {consequence} {upgrade}"
        )
    pin = pin_for(sglang_version)
    if flashinfer_kernel.by_version(pin) is not False:
        return None
    return (
        f"FlashInfer is not installed here; sglang {sglang_version} pins {pin}, which has no SM12x "
        f"allreduce kernel (the first is {FLASHINFER_SM12X}, flashinfer#3903). {consequence} {upgrade}"
    )


def tree_json(tree: SglangTree) -> dict[str, Any]:
    facts = tree.flashinfer_facts
    pin = pin_for(tree.version)
    return {
        "version": tree.version,
        "location": str(tree.package_dir),
        "install_kind": tree.install_kind.value,
        "dist_info": str(tree.dist_info) if tree.dist_info else None,
        "found_by": tree.how_found,
        "python": tree.python,
        "flashinfer": tree.flashinfer,
        "flashinfer_pinned": pin,
        "flashinfer_has_sm12x_allreduce": (facts.sm12x_kernel if facts.found else flashinfer_kernel.by_version(pin)),
        "flashinfer_evidence": facts.source,
        "record_problem": tree.record.problem,
    }
