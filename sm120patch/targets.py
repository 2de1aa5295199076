"""Which file of a given sglang tree holds each thing the patches change.

Paths are relative to the ``sglang`` package directory.  Files move between releases
(sglang-versions.md); the choice here is by existence, the content is then found by
structure, never by line.
"""

from __future__ import annotations

from collections.abc import Callable

from sm120patch.registry import Finding, Patch, PatchContext, State

COMMUNICATOR = "srt/layers/communicator.py"  # 0.4.9 - 0.5.20
ADD_NORM = "srt/layers/layer_boundary/residual/add_norm.py"  # 0.5.21+
SERVER_ARGS = "srt/server_args.py"  # auto-enable up to 0.5.14
OVERRIDES = "srt/arg_groups/overrides.py"  # auto-enable from 0.5.15
COMM_FUSION = "srt/layers/flashinfer_comm_fusion.py"  # _resolve_backend from 0.5.14


def gate_module(exists: Callable[[str], bool]) -> str:
    """The module with the runtime fusion gate and its cached ``_is_smXX_supported`` flags."""
    return ADD_NORM if exists(ADD_NORM) else COMMUNICATOR


def auto_enable_module(exists: Callable[[str], bool]) -> str:
    return OVERRIDES if exists(OVERRIDES) else SERVER_ARGS


class GateModulePatch(Patch):
    """Base of the three patches that edit the fusion-gate module (import, flag, gate)."""

    def target(self, exists: Callable[[str], bool]) -> str:
        return gate_module(exists)

    def absent(self, ctx: PatchContext, rel: str) -> Finding:
        return Finding(State.DRIFT, f"no fusion-gate module ({rel}) in {ctx.release}")
