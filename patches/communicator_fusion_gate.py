"""communicator-fusion-gate: let SM12x through the runtime allreduce-fusion gate."""

from __future__ import annotations

import libcst as cst

from sm120patch.cst_helpers import find_functions
from sm120patch.registry import Example, Finding, PatchContext, State
from sm120patch.sm_terms import admits_sm12x, clauses_in, describe, has_sm120_term
from sm120patch.targets import GateModulePatch
from sm120patch.widening import applied_or_missing_import, widen_clauses

GATE_FUNCTIONS = ("apply_flashinfer_allreduce_fusion", "flashinfer_ar_fusion_applies")
GATE_CLASS, GATE_METHOD = "CommunicateWithAllReduceAndLayerNormFn", "_gather_hidden_states_and_residual"


class CommunicatorFusionGate(GateModulePatch):
    """Widen ``(_is_sm90_supported or _is_sm100_supported)`` with ``or _is_sm120_supported``.

    Why: this is the runtime gate of FlashInfer's allreduce(+residual+RMSNorm) fusion.
    With SM120 left out, every allreduce on an RTX PRO 6000 / RTX 5090 runs unfused even
    with ``--enable-flashinfer-allreduce-fusion`` (a silent no-op; upstream-sm120.md §2).
    Only the SM clause changes; batch size, dp-attention, the flag/backend and FlashInfer
    availability terms stay exactly as they are.

    Where: ``apply_flashinfer_allreduce_fusion`` in ``layers/communicator.py``
    (0.5.8 - 0.5.20) and ``layers/layer_boundary/residual/add_norm.py`` (0.5.21),
    ``flashinfer_ar_fusion_applies`` there (0.5.22+), and the method
    ``CommunicateWithAllReduceAndLayerNormFn._gather_hidden_states_and_residual``
    (0.5.4 - 0.5.7, operands in the other order).  Exactly one SM clause must be found.

    Needs FlashInfer >= 0.6.17 at run time (first SM12x trtllm allreduce kernel, fi#3903).
    Remove when: upstream's gate admits SM12x (sglang#18758 and #32330 were closed).
    """

    id = "communicator-fusion-gate"
    summary = "widen the runtime fusion gate's SM clause with _is_sm120_supported"
    requires = ("communicator-flag",)
    examples = (
        Example(
            before=(
                "def apply_flashinfer_allreduce_fusion(batch_size: int):\n"
                "    return (\n"
                "        # the SM check\n"
                "        (_is_sm90_supported or _is_sm100_supported)\n"
                "        and _is_flashinfer_available\n"
                "        and batch_size > 0\n"
                "    )\n"
            ),
            after=(
                "def apply_flashinfer_allreduce_fusion(batch_size: int):\n"
                "    return (\n"
                "        # the SM check\n"
                "        (_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)\n"
                "        and _is_flashinfer_available\n"
                "        and batch_size > 0\n"
                "    )\n"
            ),
        ),
        Example(
            before=(
                "class CommunicateWithAllReduceAndLayerNormFn:\n"
                "    def _gather_hidden_states_and_residual(self, hidden_states):\n"
                "        if (\n"
                "            (_is_sm100_supported or _is_sm90_supported)\n"
                "            and get_global_server_args().enable_flashinfer_allreduce_fusion\n"
                "        ):\n"
                "            pass\n"
            ),
            after=(
                "class CommunicateWithAllReduceAndLayerNormFn:\n"
                "    def _gather_hidden_states_and_residual(self, hidden_states):\n"
                "        if (\n"
                "            (_is_sm100_supported or _is_sm90_supported or _is_sm120_supported)\n"
                "            and get_global_server_args().enable_flashinfer_allreduce_fusion\n"
                "        ):\n"
                "            pass\n"
            ),
        ),
        Example(
            before=(
                "def flashinfer_ar_fusion_applies(batch_size):\n"
                "    return (get_platform().is_sm90 or get_platform().is_sm100) and batch_size > 0\n"
            ),
            after=(
                "def flashinfer_ar_fusion_applies(batch_size):\n"
                "    return (get_platform().is_sm90 or get_platform().is_sm100 or get_platform().is_sm120) and batch_size > 0\n"
            ),
        ),
        Example(
            before=(
                "def flashinfer_ar_fusion_applies(batch_size: int):\n"
                "    return _is_flashinfer_available and (_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)\n"
            ),
            state=State.APPLIED,
        ),
        Example(
            before=(
                "def apply_flashinfer_allreduce_fusion_v2(batch_size: int):\n"
                "    return (_is_sm90_supported or _is_sm100_supported) and batch_size > 0\n"
            ),
            state=State.DRIFT,
            detail="apply_flashinfer_allreduce_fusion",
        ),
        Example(
            before=(
                "def apply_flashinfer_allreduce_fusion(batch_size: int):\n"
                "    return _is_flashinfer_available and batch_size > 0\n"
            ),
            state=State.DRIFT,
            detail="found 0",
        ),
    )

    def check(self, module: cst.Module, ctx: PatchContext) -> Finding:
        # Up to 0.5.7 the gate is inside the method; from 0.5.8 the method calls the
        # module-level function, which is then the only gate.
        functions = find_functions(module, GATE_FUNCTIONS) or find_functions(
            module, [GATE_METHOD], GATE_CLASS
        )
        if not functions:
            return Finding(
                State.DRIFT,
                f"no function {' / '.join(GATE_FUNCTIONS)} and no method "
                f"{GATE_CLASS}.{GATE_METHOD}: the fusion gate was renamed or moved",
            )
        if len(functions) > 1:
            return Finding(
                State.DRIFT,
                f"{len(functions)} candidate fusion gates ({', '.join(f.name.value for f in functions)}); "
                "expected exactly one",
            )
        function = functions[0]
        where = (
            f"{GATE_CLASS}.{GATE_METHOD}"
            if function.name.value == GATE_METHOD
            else function.name.value
        )
        clauses = [c for c in clauses_in(function) if not c.negated]
        if not clauses and where != function.name.value:
            return Finding(
                State.DRIFT,
                f"no function {' / '.join(GATE_FUNCTIONS)}, and {where} (the gate up to "
                "0.5.7) tests no SM clause: the fusion gate was renamed or moved",
                where,
            )
        if len(clauses) != 1:
            return Finding(
                State.DRIFT,
                f"expected exactly one SM clause like (_is_sm90_supported or "
                f"_is_sm100_supported) in {where}, found {len(clauses)}"
                + (f": {'; '.join(describe(c.probes) for c in clauses)}" if clauses else ""),
                where,
            )
        clause = clauses[0]
        evidence = [clause.node]
        if has_sm120_term(clause.probes):
            return applied_or_missing_import(module, clauses, where, evidence)
        if admits_sm12x(clause.probes):
            return Finding(
                State.NOT_NEEDED, f"{where} already admits SM12x: {describe(clause.probes)}", where, evidence
            )
        return widen_clauses(module, ctx, clauses, where, evidence)
