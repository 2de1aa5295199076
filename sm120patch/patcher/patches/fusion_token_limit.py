"""fusion-token-limit: fuse only up to the token count where fusion still pays on this host (opt-in)."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from sm120patch.patcher.kit.cst_helpers import code, replace_all, walk
from sm120patch.patcher.kit.decide import anchored_names, find_anchored, find_assigned, label
from sm120patch.patcher.kit.model import (
    Anchor,
    Edit,
    Example,
    Finding,
    Kind,
    Patch,
    PatchContext,
    Releases,
    Role,
    State,
)
from sm120patch.patcher.kit.role_shapes import limit_read
from sm120patch.patcher.patches.communicator_fusion_gate import CommunicatorFusionGate
from sm120patch.sglang.layout import ADD_NORM, COMMUNICATOR, GATE

#: The module constant sglang compares the batch with (every release 0.5.4 - 0.5.23: 2048); the
#: anchor rows' name, which the patch's lookup reads from the rows.
LIMIT_NAME = "FUSE_ALLREDUCE_MAX_BATCH_SIZE"
#: Commands, not a placeholder: each runs as printed (``measured`` says to bench first where
#: no bench result is saved).
OPT_IN = (
    "opt-in: `sm120patch bench kernel`, then `sm120patch apply --fuse-up-to measured`, lowers it to where fusion wins"
)
#: The gates that compare the batch with a literal of their own: the method gate of 0.5.4 - 0.5.7
#: (``hidden_states.shape[0] <= 4096``).  From 0.5.8 the constant is the only site: other
#: ``<= <integer>`` conjuncts there are not the limit (0.5.10's ``attn_cp_size <= 1``).
LITERAL_GATES = tuple(a for a in CommunicatorFusionGate.anchors if a.cls == "CommunicateWithAllReduceAndLayerNormFn")
#: What a gate compares with the limit: the batch (``batch_size``, or the method gate's tensor).
BATCH = frozenset({"batch_size", "hidden_states.shape[0]"})


@dataclass(frozen=True)
class Site:
    """One place sglang's fusion token limit is written: the module constant, or an integer
    literal a gate compares the batch with (``hidden_states.shape[0] <= 4096``, 0.5.4 - 0.5.7)."""

    node: cst.Integer
    where: str
    evidence: cst.CSTNode
    value: int


def limit_sites(module: cst.Module, ctx: PatchContext | None = None) -> tuple[list[Site], list[cst.FunctionDef]] | str:
    """Every site of the token limit in ``module`` and the gate functions searched, or why
    the limit cannot be read (a constant that is not one integer); ``ctx`` gives the rows
    of this tree (a role find), else the known ones."""
    sites: list[Site] = []
    limit_rows = ctx.rows_of(FusionTokenLimit) if ctx else FusionTokenLimit.anchors
    gate_rows = ctx.rows_of(CommunicatorFusionGate) if ctx else CommunicatorFusionGate.anchors
    lines = find_assigned(module, limit_rows)
    if len(lines) > 1:
        names = ", ".join(dict.fromkeys(anchor.name for anchor, _ in lines))
        return f"{names} is assigned {len(lines)} times at module level; expected once"
    for anchor, line in lines:
        (small,) = [s for s in line.body if isinstance(s, (cst.Assign, cst.AnnAssign))]
        if not isinstance(small.value, cst.Integer):
            return f"{anchor.name} = {code(small.value) if small.value else '...'} is not an integer literal"
        sites.append(Site(small.value, anchor.name, line, int(small.value.evaluated_value)))
    gates = [f for _, f in find_anchored(module, gate_rows)]
    for anchor, gate in find_anchored(module, LITERAL_GATES):
        for node in walk(gate):
            if not isinstance(node, cst.Comparison):
                continue
            left = node.left
            for target in node.comparisons:
                if (
                    isinstance(target.operator, cst.LessThanEqual)
                    and isinstance(target.comparator, cst.Integer)
                    and code(left) in BATCH
                ):
                    where = f"{label(anchor)}: {code(node)}"
                    sites.append(Site(target.comparator, where, node, int(target.comparator.evaluated_value)))
                left = target.comparator
    return sites, gates


def limit_in_force(sites: list[Site]) -> int:
    """The largest batch every site lets through."""
    return min(site.value for site in sites)


def shown(sites: list[Site], rows: tuple[Anchor, ...] | None = None) -> str:
    constants = anchored_names(rows or FusionTokenLimit.anchors, Kind.ASSIGNMENT)
    return "; ".join(f"{site.where} = {site.value}" if site.where in constants else site.where for site in sites)


class FusionTokenLimit(Patch):
    """Set sglang's fusion token limit to ``N`` (``apply --fuse-up-to N``); opt-in, never raised.

    Why: sglang fuses every batch up to one fixed limit, whatever the host:
    ``FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048`` in the gate's module (the gate's
    ``batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE`` conjunct from 0.5.8; 0.5.4 - 0.5.7's gate
    method compares ``hidden_states.shape[0] <= 4096``, ``<= 2048`` from 0.5.5.post2, and the
    MLP fusion with the next layer reads the constant).  Where fusion loses to the unfused
    path at prefill sizes (2048 tokens on 2x H200 against NCCL; a regression at TP 4 on PCIe,
    sglang#32330; sglang#28912 asks for fusion at decode only), the limit measured by
    ``sm120patch bench kernel`` keeps the decode gain and the prefill speed.  Without
    ``--fuse-up-to`` the limit is left as it is.

    Only lower.  How sglang sizes FlashInfer's workspace (``max_token_num``,
    ``flashinfer_comm_fusion.py``): up to 0.5.10 on first use, for the 2048 tokens that
    ``flashinfer_allreduce_residual_rmsnorm`` and ``ensure_workspace_initialized`` default to;
    from 0.5.11 before CUDA-graph capture, for ``max_token_num=FUSE_ALLREDUCE_MAX_BATCH_SIZE``
    (``model_runner.py``, ``runner/base_runner.py`` from 0.5.14), so the lowered constant
    shrinks the workspace with it; from 0.5.20 ``max(max_token_num, the largest batch
    seen)``.  A batch above the workspace meets no check in 0.5.4 - 0.5.5 (whose gate lets
    4096 tokens through a 2048-token workspace); 0.5.5.post1 sizes it for 16384 tokens and runs
    a larger batch unfused (``if input_tensor.shape[0] > max_token_num: ... return None,
    None``); ``assert input_tensor.shape[0] <= max_token_num`` from 0.5.5.post2 (2048 again),
    and from 0.5.20 a size check that quietly runs it unfused.  Above 2048 sglang has never run the fused kernel, and up to 0.5.10 such a batch
    would overrun the workspace: ``--fuse-up-to`` above sglang's own limit is refused.

    Remove when: sglang's limit follows the host's measured crossover (sglang#28912).
    """

    id = "fusion-token-limit"
    summary = "opt-in (apply --fuse-up-to N): lower the token count up to which the gate fuses"
    optional = "opt-in: it only lowers the token count up to which the gate fuses"
    edits = Edit.LIMIT
    place = GATE
    role = Role(
        "the token limit the fusion gate compares the batch with",
        follows="communicator-fusion-gate",
        reads=limit_read,
        kind=Kind.ASSIGNMENT,
    )
    anchors = (
        Anchor(ADD_NORM, LIMIT_NAME, Releases("0.5.21"), kind=Kind.ASSIGNMENT, expect=State.NOT_NEEDED, note=OPT_IN),
        Anchor(
            COMMUNICATOR,
            LIMIT_NAME,
            Releases("0.5.8", "0.5.20"),
            kind=Kind.ASSIGNMENT,
            expect=State.NOT_NEEDED,
            note=OPT_IN,
        ),
        Anchor(
            COMMUNICATOR,
            LIMIT_NAME,
            Releases("0.5.4", "0.5.7"),
            kind=Kind.ASSIGNMENT,
            expect=State.NOT_NEEDED,
            note=f"{OPT_IN}, also the gate method's `hidden_states.shape[0] <= 4096` (2048 from 0.5.5.post2)",
        ),
    )
    examples = (
        Example(
            "the module constant lowered (0.5.8 - 0.5.23)",
            """
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048


            def apply_flashinfer_allreduce_fusion(batch_size: int):
                return (_is_sm90_supported or _is_sm100_supported) and batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE
            """,
            after="""
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 512


            def apply_flashinfer_allreduce_fusion(batch_size: int):
                return (_is_sm90_supported or _is_sm100_supported) and batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE
            """,
            detail="will set the fusion token limit to 512 (now FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048)",
            evidence=(1,),
            token_limit=512,
        ),
        Example(
            "another `<= <integer>` conjunct in the gate is not the limit (0.5.10's attn_cp_size)",
            """
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048


            def apply_flashinfer_allreduce_fusion(batch_size: int):
                return (
                    (_is_sm90_supported or _is_sm100_supported)
                    and batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE
                    and get_global_server_args().attn_cp_size <= 1
                )
            """,
            after="""
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 1024


            def apply_flashinfer_allreduce_fusion(batch_size: int):
                return (
                    (_is_sm90_supported or _is_sm100_supported)
                    and batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE
                    and get_global_server_args().attn_cp_size <= 1
                )
            """,
            detail="will set the fusion token limit to 1024 (now FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048)",
            evidence=(1,),
            token_limit=1024,
        ),
        Example(
            "the constant and the gate method's literal (0.5.4 - 0.5.7)",
            """
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048


            class CommunicateWithAllReduceAndLayerNormFn:
                def _gather_hidden_states_and_residual(self, hidden_states):
                    if (_is_sm100_supported or _is_sm90_supported) and hidden_states.shape[0] <= 4096:
                        pass
            """,
            after="""
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 256


            class CommunicateWithAllReduceAndLayerNormFn:
                def _gather_hidden_states_and_residual(self, hidden_states):
                    if (_is_sm100_supported or _is_sm90_supported) and hidden_states.shape[0] <= 256:
                        pass
            """,
            evidence=(1, 6),
            token_limit=256,
        ),
        Example(
            "lowered earlier, asked again with another limit",
            """
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 512
            """,
            after="""
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 1024
            """,
            token_limit=1024,
        ),
        Example(
            "already at the limit asked",
            """
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 512
            """,
            state=State.APPLIED,
            detail="fusion token limit 512: FUSE_ALLREDUCE_MAX_BATCH_SIZE = 512",
            evidence=(1,),
            token_limit=512,
        ),
        Example(
            "no limit asked: left as it is",
            """
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048
            """,
            state=State.NOT_NEEDED,
            detail="fusion token limit in force: 2048 (FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048); opt-in",
            evidence=(1,),
        ),
        Example(
            "no limit in the release, none asked",
            """
            def apply_flashinfer_allreduce_fusion(batch_size: int):
                return (_is_sm90_supported or _is_sm100_supported) and batch_size > 0
            """,
            state=State.NOT_NEEDED,
            detail="no fusion token limit",
        ),
        Example(
            "a limit asked where the release has none",
            """
            def apply_flashinfer_allreduce_fusion(batch_size: int):
                return (_is_sm90_supported or _is_sm100_supported) and batch_size > 0
            """,
            state=State.DRIFT,
            detail="--fuse-up-to 512: this sglang has no fusion token limit to lower",
            token_limit=512,
        ),
        Example(
            "the constant computed, not written",
            """
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 1 << 11
            """,
            state=State.DRIFT,
            detail="FUSE_ALLREDUCE_MAX_BATCH_SIZE = 1 << 11 is not an integer literal",
        ),
        Example(
            "the constant only annotated",
            """
            FUSE_ALLREDUCE_MAX_BATCH_SIZE: int
            """,
            state=State.DRIFT,
            detail="FUSE_ALLREDUCE_MAX_BATCH_SIZE = ... is not an integer literal",
        ),
        Example(
            "the constant assigned twice: which one holds?",
            """
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 4096
            """,
            state=State.DRIFT,
            detail="FUSE_ALLREDUCE_MAX_BATCH_SIZE is assigned 2 times at module level; expected once",
        ),
    )

    def check(self, module: cst.Module, ctx: PatchContext) -> Finding:
        rows = ctx.rows_of(self)
        limit = " or ".join(anchored_names(rows, Kind.ASSIGNMENT))
        found = limit_sites(module, ctx)
        if isinstance(found, str):
            return Finding(State.DRIFT, found)
        sites, gates = found
        asked = ctx.token_limit
        if not sites:
            if asked is None:
                return Finding(State.NOT_NEEDED, f"no fusion token limit in {ctx.release}'s gate ({limit})")
            return Finding(
                State.DRIFT,
                f"--fuse-up-to {asked}: {ctx.release} has no fusion token limit to lower (no module-level "
                f"{limit} and no `<= <integer>` in the fusion gate)",
            )
        evidence = [site.evidence for site in sites]
        now = f"{limit_in_force(sites)} ({shown(sites, rows)})"
        if asked is None:
            return Finding(
                State.NOT_NEEDED, f"fusion token limit in force: {now}; {OPT_IN}", limit, evidence, scopes=gates
            )
        if all(site.value == asked for site in sites):
            return Finding(
                State.APPLIED, f"fusion token limit {asked}: {shown(sites, rows)}", limit, evidence, scopes=gates
            )

        def apply(tree: cst.Module) -> cst.Module:
            pairs = [(site.node, cst.Integer(str(asked))) for site in sites if site.value != asked]
            return replace_all(tree, pairs, gates)

        return Finding(
            State.PENDING,
            f"will set the fusion token limit to {asked} (now {shown(sites, rows)})",
            limit,
            evidence,
            apply,
            gates,
        )
