"""What still keeps the fused kernel from running once the gates are open: FlashInfer
without the SM12x kernel (and what the release then does), no SM12x GPU on this host."""

from __future__ import annotations

from sm120patch.errors import coded
from sm120patch.sglang import releases, startup_risk
from sm120patch.sglang.layout import COMM_FUSION
from sm120patch.sglang.tree import SglangTree

#: What "applied" does not say: the gates are open, the host may still stop the kernel.
HOST_HINT = (
    "the gates are open; whether this host runs the fused kernel (FlashInfer's SM12x build, "
    "P2P, multicast, GPUDirect RDMA) is for `sm120patch doctor` to say"
)


def missing_kernel_effect(tree: SglangTree) -> str | None:
    """What this release does when fusion is on and FlashInfer lacks the SM12x kernel."""
    try:
        effect = startup_risk.missing_kernel_effect(tree.path(COMM_FUSION).read_bytes())
    except OSError:
        return None
    return startup_risk.effect_sentence(tree.version or "(unknown version)", effect) if effect else None


def fused_path_warnings(tree: SglangTree) -> list[str]:
    """What would keep the fused kernel from running even with every patch applied.  The
    release's code is read (``startup_risk``) only when there is something to warn about."""
    if releases.flashinfer_warning(tree.flashinfer_facts, tree.version) is None:
        return []
    warning = releases.flashinfer_warning(tree.flashinfer_facts, tree.version, missing_kernel_effect(tree))
    return [coded("kernel-missing", warning)] if warning else []


def missing_kernel_refusal(tree: SglangTree) -> str | None:
    """Why apply must not open the gates: the FlashInfer beside sglang has no SM12x build of
    the trtllm allreduce, so fusion on SM12x would stop the server (0.5.4-0.5.9) or change
    nothing (0.5.10+).  None when FlashInfer has the kernel, or is not installed (then the
    gate cannot open at all: a warning says so)."""
    facts = tree.flashinfer_facts
    if not facts.found or facts.sm12x_kernel is not False:
        return None
    try:
        effect = startup_risk.missing_kernel_effect(tree.path(COMM_FUSION).read_bytes())
    except OSError:
        effect = None
    release = tree.version or "(unknown version)"
    consequence = startup_risk.effect_sentence(release, effect) if effect else "fusion cannot run on SM12x with it"
    name = f"FlashInfer {facts.version}" if facts.version else "the installed FlashInfer"
    return (
        f"refusing to patch, nothing was written: {name} has no SM12x allreduce kernel ({facts.source}), and "
        f"{consequence}; what works is sglang >= {releases.FIRST_PINNING_SM12X} with the FlashInfer it pins, or "
        f"flashinfer-python>={releases.FLASHINFER_SM12X} (untested with older sglang); "
        "--allow-missing-kernel writes anyway"
    )


def gpu_note(timeout: float) -> str | None:
    """Whether this host has an SM12x GPU (an image build usually has no GPU at all)."""
    from sm120patch.runner import gpus

    seen = gpus.from_nvidia_smi(timeout)
    if not seen.answered:
        return f"no NVIDIA GPU seen ({seen.error}): fine for an image build; the patches act on SM12x hosts"
    if not seen.sm12x and not seen.unknown:
        shown = gpus.describe_all(seen.gpus) or "none"
        return f"no SM12x GPU seen by nvidia-smi ({shown}): the patches change nothing at run time here"
    return None
