"""communicator-fusion-gate: let SM12x through the runtime allreduce-fusion gate."""

from __future__ import annotations

import libcst as cst

from sm120patch.patcher.kit.decide import decide, find_anchored, label, searched
from sm120patch.patcher.kit.model import Anchor, Edit, Example, Finding, Patch, PatchContext, Releases, Role, State
from sm120patch.patcher.kit.role_shapes import is_gate
from sm120patch.patcher.kit.sm_terms import clauses_in, describe
from sm120patch.sglang.layout import ADD_NORM, COMMUNICATOR, GATE


class CommunicatorFusionGate(Patch):
    """Widen ``(_is_sm90_supported or _is_sm100_supported)`` with ``or _is_sm120_supported``.

    Why: this is the runtime gate of FlashInfer's allreduce(+residual+RMSNorm) fusion.
    With SM120 left out, every allreduce on an RTX PRO 6000 / RTX 5090 runs unfused even
    with ``--enable-flashinfer-allreduce-fusion`` (a silent no-op up to 0.5.13).  Only the
    SM clause changes; batch size, dp-attention, the flag or backend and FlashInfer
    availability stay exactly as they are.  Exactly one anchor function must test exactly
    one SM clause (a negated one does not count).

    Needs FlashInfer >= 0.6.17 at run time (first SM12x trtllm allreduce kernel,
    flashinfer#3903).  Remove when: upstream's gate admits SM12x (sglang#18758 and
    sglang#32330 were closed unmerged).
    """

    id = "communicator-fusion-gate"
    summary = "widen the runtime fusion gate's SM clause with _is_sm120_supported"
    edits = Edit.OR_TERM
    requires = ("communicator-flag",)
    place = GATE
    role = Role(
        "the fusion gate (a test of the fusion's SM clause beside its backend, enable option or token limit)",
        words=("is_sm", "flashinfer_allreduce_fusion"),
        matches=is_gate,
    )
    anchors = (
        Anchor(ADD_NORM, "flashinfer_ar_fusion_applies", Releases("0.5.22")),
        Anchor(ADD_NORM, "apply_flashinfer_allreduce_fusion", Releases("0.5.21", "0.5.21")),
        Anchor(COMMUNICATOR, "apply_flashinfer_allreduce_fusion", Releases("0.5.8", "0.5.20")),
        Anchor(
            COMMUNICATOR,
            "_gather_hidden_states_and_residual",
            Releases("0.5.4", "0.5.7"),
            cls="CommunicateWithAllReduceAndLayerNormFn",
            note="operands in the other order: (_is_sm100_supported or _is_sm90_supported)",
        ),
    )
    examples = (
        Example(
            "module function with a comment in the condition (0.5.8 - 0.5.21)",
            """
            def apply_flashinfer_allreduce_fusion(batch_size: int):
                return (
                    # the SM check
                    (_is_sm90_supported or _is_sm100_supported)
                    and _is_flashinfer_available
                    and batch_size > 0
                )
            """,
            after="""
            def apply_flashinfer_allreduce_fusion(batch_size: int):
                return (
                    # the SM check
                    (_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)
                    and _is_flashinfer_available
                    and batch_size > 0
                )
            """,
            detail=(
                "apply_flashinfer_allreduce_fusion: will widen (_is_sm90_supported or _is_sm100_supported)"
                " with _is_sm120_supported"
            ),
            evidence=(4,),
        ),
        Example(
            "method, operands in the other order (0.5.4 - 0.5.7)",
            """
            class CommunicateWithAllReduceAndLayerNormFn:
                def _gather_hidden_states_and_residual(self, hidden_states):
                    if (
                        (_is_sm100_supported or _is_sm90_supported)
                        and get_global_server_args().enable_flashinfer_allreduce_fusion
                    ):
                        pass
            """,
            after="""
            class CommunicateWithAllReduceAndLayerNormFn:
                def _gather_hidden_states_and_residual(self, hidden_states):
                    if (
                        (_is_sm100_supported or _is_sm90_supported or _is_sm120_supported)
                        and get_global_server_args().enable_flashinfer_allreduce_fusion
                    ):
                        pass
            """,
        ),
        Example(
            "a bare term inside an `and` chain gets parentheses",
            """
            def flashinfer_ar_fusion_applies(batch_size):
                return _is_flashinfer_available and _is_sm100_supported and batch_size > 0
            """,
            after="""
            def flashinfer_ar_fusion_applies(batch_size):
                return _is_flashinfer_available and (_is_sm100_supported or _is_sm120_supported) and batch_size > 0
            """,
        ),
        Example(
            "the gate tests get_platform() inline",
            """
            def flashinfer_ar_fusion_applies(batch_size):
                return (get_platform().is_sm90 or get_platform().is_sm100) and batch_size > 0
            """,
            after="""
            def flashinfer_ar_fusion_applies(batch_size):
                return (get_platform().is_sm90 or get_platform().is_sm100 or get_platform().is_sm120) and batch_size > 0
            """,
        ),
        Example(
            "already widened",
            """
            def flashinfer_ar_fusion_applies(batch_size: int):
                return _is_flashinfer_available and (_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)
            """,
            state=State.APPLIED,
            detail="flashinfer_ar_fusion_applies: (_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)",
            evidence=(2,),
        ),
        Example(
            "the gate renamed",
            """
            def apply_flashinfer_allreduce_fusion_v2(batch_size: int):
                return (_is_sm90_supported or _is_sm100_supported) and batch_size > 0
            """,
            state=State.DRIFT,
            detail="function apply_flashinfer_allreduce_fusion (seen in 0.5.8 - 0.5.20)",
        ),
        Example(
            "no SM clause in the gate",
            """
            def apply_flashinfer_allreduce_fusion(batch_size: int):
                return _is_flashinfer_available and batch_size > 0
            """,
            state=State.DRIFT,
            detail="found 0",
        ),
        Example(
            "only a negated SM clause: not a gate that admits GPUs",
            """
            def apply_flashinfer_allreduce_fusion(batch_size: int):
                return not (_is_sm90_supported or _is_sm100_supported) and batch_size > 0
            """,
            state=State.DRIFT,
            detail="found 0",
        ),
        Example(
            "the method calls the gate function, which lost its SM clause (0.5.8 - 0.5.20 shape)",
            """
            def apply_flashinfer_allreduce_fusion(batch_size: int):
                return _is_flashinfer_available and batch_size > 0


            class CommunicateWithAllReduceAndLayerNormFn:
                def _gather_hidden_states_and_residual(self, hidden_states):
                    if apply_flashinfer_allreduce_fusion(hidden_states.shape[0]):
                        pass
            """,
            state=State.DRIFT,
            detail=(
                "found 0 SM clauses like (_is_sm90_supported or _is_sm100_supported) in apply_flashinfer_allreduce_fusion,"
                " CommunicateWithAllReduceAndLayerNormFn._gather_hidden_states_and_residual: the fusion gate was renamed"
                " or rewritten"
            ),
        ),
        Example(
            "a backport that left the old SM clause in the method too",
            """
            def apply_flashinfer_allreduce_fusion(batch_size: int):
                return (_is_sm90_supported or _is_sm100_supported) and batch_size > 0


            class CommunicateWithAllReduceAndLayerNormFn:
                def _gather_hidden_states_and_residual(self, hidden_states):
                    if (_is_sm100_supported or _is_sm90_supported) and apply_flashinfer_allreduce_fusion(
                        hidden_states.shape[0]
                    ):
                        pass
            """,
            state=State.DRIFT,
            detail=(
                "2 candidate fusion gates (apply_flashinfer_allreduce_fusion,"
                " CommunicateWithAllReduceAndLayerNormFn._gather_hidden_states_and_residual); expected exactly one"
            ),
        ),
        Example(
            "the gate split into one test per generation",
            """
            def apply_flashinfer_allreduce_fusion(batch_size: int):
                if _is_sm100_supported:
                    return batch_size <= 2048
                return _is_sm90_supported and batch_size <= 128
            """,
            state=State.DRIFT,
            detail=(
                "expected exactly one SM clause like (_is_sm90_supported or _is_sm100_supported) in"
                " apply_flashinfer_allreduce_fusion, found 2: _is_sm100_supported; _is_sm90_supported"
            ),
        ),
    )

    def check(self, module: cst.Module, ctx: PatchContext) -> Finding:
        rows = ctx.rows_of(self)
        found = find_anchored(module, rows)
        if not found:
            return Finding(State.DRIFT, f"the fusion gate was renamed or moved: found none of {searched(rows)}")
        # Up to 0.5.7 the gate is the method; from 0.5.8 the method calls the module-level
        # function, which is then the only one that tests an SM clause.
        gates = [(a, f, [c for c in clauses_in(f) if not c.negated]) for a, f in found]
        testing = [g for g in gates if g[2]]
        if len(testing) > 1:
            names = ", ".join(label(a) for a, _, _ in testing)
            return Finding(State.DRIFT, f"{len(testing)} candidate fusion gates ({names}); expected exactly one")
        if not testing:
            shown = ", ".join(label(a) for a, _, _ in gates)
            return Finding(
                State.DRIFT,
                f"found 0 SM clauses like (_is_sm90_supported or _is_sm100_supported) in {shown}: the "
                f"fusion gate was renamed or rewritten (looked for {searched(rows)})",
            )
        anchor, function, clauses = testing[0]
        where = label(anchor)
        if len(clauses) != 1:
            return Finding(
                State.DRIFT,
                f"expected exactly one SM clause like (_is_sm90_supported or _is_sm100_supported) in "
                f"{where}, found {len(clauses)}: {'; '.join(describe(c.terms) for c in clauses)}",
                where,
            )
        return decide(module, ctx, clauses, where, [clauses[0].node], [function])
