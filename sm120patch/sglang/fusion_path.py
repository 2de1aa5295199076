"""What the sweep of sglang's SM checks (``gate_sweep``) takes as FlashInfer's allreduce-fusion
path, and the SM checks on it that are known and deliberate.

Data only.  "On the path" is by name: a check counts when the module it sits in, or the
function (``Class.method``) around it, matches one of ``ON_PATH``.  A known gate is matched by
structure too: the module, the function, the architectures the check names, and a word of the
statement it governs (``mnnvl`` in ``if get_platform().is_sm100: return "mnnvl"``), so that a
new SM100-only check in the same function is still reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class OnPath:
    """Names that put a check on the fused path, and why."""

    pattern: re.Pattern[str]  # searched in "<module path>::<qualname>"
    reason: str


ON_PATH: tuple[OnPath, ...] = (
    OnPath(
        re.compile(
            r"[:.]\w*(?:allreduce_fusion|(?<![a-z0-9])ar_fusion|fused_allreduce|allreduce_rmsnorm|fuse\w*_allreduce|flashinfer_ar(?:_|$))"
        ),
        "the function names the allreduce fusion (its gate, the fused call, the server flag, its "
        "auto-enable) or FlashInfer's allreduce",
    ),
    OnPath(
        re.compile(r"(?:flashinfer_comm|comm_fusion)\w*\.py::"),
        "FlashInfer's comm-fusion module: the workspace, its preflight and the backend resolution",
    ),
    OnPath(
        re.compile(r"/fusions/\w+\.py::"),
        "sglang's layer-boundary fusions (0.5.21+): the allreduce fusion and its backends",
    ),
    OnPath(
        re.compile(r"[:.]\w*(?:trtllm|flashinfer|allreduce)\w*(?:workspace|backend)"),
        "the function names the fusion's workspace or its backend",
    ),
)

#: Bytes a file on the path names (the pre-filter, with its path: code about the allreduce
#: fusion names sglang's ``enable_flashinfer_allreduce_fusion`` flag or FlashInfer's allreduce).
#: One pattern, since each needle costs a scan of the whole package (~70 MB in 0.5.23); it is
#: in ``allreduce``, ``Allreduce`` and ``AllReduce``, and its literal start keeps the regex
#: engine as fast as one ``bytes.find`` (two finds would cost twice that).
#: The fields behind the options that turn fusion on (``options.BACKEND``, ``options.ENABLE``), as
#: sglang's code reads them: a function that tests one beside the fusion's SM clause is its gate,
#: one that sets one its auto-enable (``patcher/kit/role_shapes.py``).
SWITCH_NAMES = frozenset({"flashinfer_allreduce_fusion_backend", "enable_flashinfer_allreduce_fusion"})
FUSION_BYTES = re.compile(rb"ll[rR]educe")
#: Bytes that every SM check the sweep reads contains: the terms of ``sm_names`` and the raw
#: capability comparisons (``get_device_capability()``, ``get_device_sm()``).
SM_BYTES: tuple[bytes, ...] = (b"is_sm", b"is_blackwell", b"capability", b"device_sm")


@dataclass(frozen=True)
class KnownGate:
    """An SM check on the fused path that is deliberate: listed, never reported."""

    kind: str  # what sort of check it is, for ``list --docs``
    module: str  # the file, relative to the sglang package
    function: str  # ``name`` or ``Class.method``
    archs: frozenset[str]  # what the check may name: "sm90", "sm100", "capability" (a raw comparison)
    words: tuple[str, ...]  # one of these is in the function's name or the statement it governs
    reason: str
    seen: str  # the releases it was seen in

    def matches(self, module: str, function: str, archs: frozenset[str], statement: str) -> bool:
        return (
            module == self.module
            and function == self.function
            and archs <= self.archs
            and any(word in function or word in statement for word in self.words)
        )


_COMM = "srt/layers/flashinfer_comm_fusion.py"
_SM100_ONLY = "an SM100-only backend"

KNOWN_GATES: tuple[KnownGate, ...] = (
    KnownGate(
        _SM100_ONLY,
        _COMM,
        "_mnnvl_supported",
        frozenset({"sm90", "sm100"}),
        ("mnnvl",),
        "FlashInfer's mnnvl (multi-node NVLink) allreduce runs on SM90/SM100 only; on SM12x the "
        "resolver picks trtllm, the backend the SM12x kernel is built for (flashinfer#3903)",
        "0.5.14 - now",
    ),
    KnownGate(
        _SM100_ONLY,
        _COMM,
        "_resolve_backend",
        frozenset({"sm100"}),
        ("mnnvl", "cutedsl"),
        "the resolver's SM100 branches choose mnnvl (auto, or multi-node) and admit cutedsl, both "
        "datacenter-Blackwell backends; SM12x falls through to trtllm on one node, which is what "
        "the fusion-backend-resolver patch opens",
        "0.5.14 - now",
    ),
)
KNOWN_GATES += (
    KnownGate(
        "a model-specific enable",
        "srt/arg_groups/overrides.py",
        "_flashinfer_allreduce_fusion_auto_enable",
        frozenset({"sm100"}),
        ("is_mimo",),
        "MiMo's auto-enable picks the cutedsl backend, which is SM100-only (flashinfer_mnnvl_cutedsl); "
        "every other model's auto-enable is the SM clause server-args-auto-enable widens",
        "0.5.23 - now",
    ),
)
KNOWN_GATES += (
    KnownGate(
        "a platform workaround",
        _COMM,
        "_should_force_posix_fd_transport",
        frozenset({"capability"}),
        ("posix_fd",),
        "forces FlashInfer's POSIX-fd transport on aarch64 SM100 (GB200/GB300) only, a workaround "
        "for a transport issue there; it decides how the workspace is shared, not whether fusion runs",
        "0.5.10 - 0.5.13.post1",
    ),
    KnownGate(
        "a plain-allreduce table",
        "srt/models/beam.py",
        "BeamModel._flashinfer_ar_band",
        frozenset({"capability"}),
        ("_FLASHINFER_AR_TOKEN_BAND",),
        "Beam's own FlashInfer allreduce (not the fused RMSNorm path) runs in the token band measured "
        "for a GPU and TP size (only (10, 3) at TP4 so far), and stands aside when the fusion is on",
        "0.5.23 - now",
    ),
)
