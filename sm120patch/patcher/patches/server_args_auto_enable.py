"""server-args-auto-enable: let the model auto-enable of fusion consider SM12x, at TP 2 unless asked."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from sm120patch.patcher.kit.auto_enable_tp import AT_ANY, AT_TP2, SAFE_TP
from sm120patch.patcher.kit.cst_helpers import code, iter_children, replace_all, walk
from sm120patch.patcher.kit.decide import decide, find_anchored, label, searched
from sm120patch.patcher.kit.model import Anchor, Edit, Example, Finding, Patch, PatchContext, Releases, Role, State
from sm120patch.patcher.kit.role_shapes import is_auto_enable
from sm120patch.patcher.kit.sm_terms import (
    Clause,
    SmTerm,
    admits_sm12x,
    clause_terms,
    conjuncts,
    describe,
    names_sm120,
    or_operands,
    sm_term_of,
)
from sm120patch.sglang.layout import AUTO_ENABLE, OVERRIDES, SERVER_ARGS

FUSION_FIELDS = ("enable_flashinfer_allreduce_fusion", "flashinfer_allreduce_fusion_backend")
SERVER_ARGS_CLASS = "ServerArgs"
ADJUSTMENTS = "_handle_model_specific_adjustments"
TP_FIELD = "tp_size"  # the server argument, on ``self`` up to 0.5.14 and on ``view`` from 0.5.15


def _tp_test(receiver: str) -> cst.Comparison:
    """``<receiver>.tp_size == 2``."""
    return cst.Comparison(
        cst.Attribute(cst.Name(receiver), cst.Name(TP_FIELD)),
        [cst.ComparisonTarget(cst.Equal(), cst.Integer(str(SAFE_TP)))],
    )


def _is_tp_test(node: cst.BaseExpression) -> bool:
    if not (isinstance(node, cst.Comparison) and len(node.comparisons) == 1):
        return False
    (target,) = node.comparisons
    left = node.left
    return (
        isinstance(target.operator, cst.Equal)
        and isinstance(target.comparator, cst.Integer)
        and target.comparator.evaluated_value == SAFE_TP
        and isinstance(left, cst.Attribute)
        and isinstance(left.value, cst.Name)
        and left.attr.value == TP_FIELD
    )


def _tp_gated(term: cst.BaseExpression, receiver: str) -> cst.BooleanOperation:
    """``(<SM120 term> and <receiver>.tp_size == 2)``."""
    bare = term.with_changes(lpar=(), rpar=())
    return cst.BooleanOperation(bare, cst.And(), _tp_test(receiver), lpar=(cst.LeftParen(),), rpar=(cst.RightParen(),))


def _gated_term(node: cst.BaseExpression) -> SmTerm | None:
    """The SM120 term of ``(<SM120 term> and <x>.tp_size == 2)``, if ``node`` is that."""
    if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.And) and _is_tp_test(node.right):
        term = sm_term_of(node.left)
        if term is not None and names_sm120([term]):
            return term
    return None


@dataclass(frozen=True)
class _Gate:
    """An SM clause of an auto-enable test, read with the TP-2 form this patch writes."""

    clause: Clause
    gated: tuple[cst.BooleanOperation, ...]  # its ``(<SM120 term> and x.tp_size == 2)`` operands
    receiver: str | None  # what holds the TP size there: the function's first parameter


def _clauses_in_test(
    test: cst.BaseExpression, negated: bool = False
) -> list[tuple[Clause, tuple[cst.BooleanOperation, ...]]]:
    """``sm_terms.clauses_in_test``, where an SM clause may also hold the TP-2 form: each
    clause with its TP-2 operands (their SM120 term stands for them in the clause's terms)."""
    found: list[tuple[Clause, tuple[cst.BooleanOperation, ...]]] = []
    parts = list(conjuncts(test))
    for part in parts:
        if isinstance(part, cst.UnaryOperation) and isinstance(part.operator, cst.Not):
            found.extend(_clauses_in_test(part.expression, not negated))
            continue
        terms = clause_terms(part)
        gated: tuple[cst.BooleanOperation, ...] = ()
        if terms is None:
            operands = or_operands(part) or []
            read = [_gated_term(o) or sm_term_of(o) for o in operands]
            gated = tuple(o for o in operands if isinstance(o, cst.BooleanOperation) and _gated_term(o))
            if not gated or any(t is None for t in read):
                continue
            terms = [t for t in read if t is not None]
        found.append((Clause(part, tuple(terms), negated, standalone=len(parts) == 1), gated))
    return found


def _gated_nodes(gate: _Gate) -> set[int]:
    """The ids of the SM120 terms that stand under a TP conjunct in ``gate``."""
    return {id(o.left) for o in gate.gated}


def _receiver(function: cst.FunctionDef) -> str | None:
    params = function.params.params
    return params[0].name.value if params else None


def _is_none(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def _dict_keys(node: cst.Dict) -> list[str | None]:
    keys: list[str | None] = []
    for element in node.elements:
        if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString):
            keys.append(ast.literal_eval(element.key.value))
        else:
            keys.append(None)
    return keys


def _turns_fusion_on(node: cst.CSTNode) -> bool:
    """``self.enable_flashinfer_allreduce_fusion = True``, ``...backend = "auto"`` or
    ``return {"flashinfer_allreduce_fusion_backend": backend}``."""
    if isinstance(node, cst.Assign):
        for target in node.targets:
            attr = target.target
            if isinstance(attr, cst.Attribute) and attr.attr.value in FUSION_FIELDS:
                if attr.attr.value == FUSION_FIELDS[0]:
                    return isinstance(node.value, cst.Name) and node.value.value == "True"
                return not _is_none(node.value)
    if isinstance(node, cst.Return) and isinstance(node.value, cst.Dict):
        return any(
            key == FUSION_FIELDS[1] and not _is_none(element.value)
            for key, element in zip(_dict_keys(node.value), node.value.elements, strict=False)
        )
    return False


def _enables(node: cst.CSTNode, chain: tuple[cst.If, ...] = ()) -> Iterator[tuple[cst.If, ...]]:
    """For each statement that turns fusion on, the ``if`` statements it sits in."""
    if _turns_fusion_on(node):
        yield chain
        return
    if isinstance(node, cst.If):
        yield from _enables(node.body, (*chain, node))
        if node.orelse is not None:  # an elif/else body does not run under this test
            yield from _enables(node.orelse, chain)
        return
    for child in iter_children(node):
        yield from _enables(child, chain)


def _only_fusion(body: cst.CSTNode) -> bool:
    """Whether a block decides nothing but fusion (no other ``self.x =`` or returned key)."""
    for node in walk(body):
        if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            for target in targets:
                if isinstance(target, cst.Attribute) and target.attr.value not in FUSION_FIELDS:
                    return False
        if (
            isinstance(node, cst.Return)
            and isinstance(node.value, cst.Dict)
            and any(key not in FUSION_FIELDS for key in _dict_keys(node.value))
        ):
            return False
    return True


class ServerArgsAutoEnable(Patch):
    """Widen the SM clause of the ``if`` that auto-enables fusion for supported models, on
    SM12x at TP 2 only unless asked.

    Why: for DeepSeek-V3, GLM-4.x MoE, Qwen3 MoE, GPT-OSS, Kimi K2.5 and others sglang
    turns fusion on by itself when ``(is_sm90_supported() or is_sm100_supported())``.  On
    SM12x it never does, so users had to know the flag.  Only the SM clause of an ``if``
    whose body does nothing but turn fusion on is widened; other clauses in the same test
    (``(self.nnodes == 1 or is_sm100_supported())``, the multi-node MNNVL choice) and every
    other SM100 check in the file stay as they are.  Blocks that also pick SM100-only
    kernels (the DeepSeek blocks of 0.5.3.post2 - 0.5.6) are left alone.  Where upstream
    already admits SM12x (``is_blackwell_supported()``: GPT-OSS in 0.5.4.post2 - 0.5.6,
    every model in 0.5.7) the patch is not needed.  ``is_sm120_supported`` is imported
    where the file lacks it.

    TP 2 only, by default: the SM120 term comes with a TP conjunct,
    ``(is_sm120_supported() and self.tp_size == 2)``, the TP size named as the function names
    its server arguments (``self`` in ``ServerArgs._handle_model_specific_adjustments`` up to
    0.5.14, ``view`` in ``overrides._flashinfer_allreduce_fusion_auto_enable`` from 0.5.15).  On
    PCIe SM12x fusion regressed at TP 4 (sglang#32330), and TP 8 is the all-to-all pattern
    sglang's own PCIe-IPC allreduce (0.5.21+) says collapses on that fabric; no report has it
    losing at TP 2.  SM90 and SM100 keep upstream's behaviour, and an explicit fusion flag on
    the server still fuses at any TP (the runtime gate is open).  ``apply --auto-enable-tp any``
    writes the bare term (every TP, as on SM90/SM100), ``--auto-enable-tp 2`` the TP-2 form
    again; the ask is recorded in the saved state.  Asked neither way, either form (and a hand
    edit's bare term) reads as applied.  ``apply --skip server-args-auto-enable`` keeps fusion
    opt-in at every TP.
    Remove when: upstream auto-enables on SM12x (no release does, through 0.5.23).
    """

    id = "server-args-auto-enable"
    summary = "widen the model auto-enable's SM clause with is_sm120_supported(), at TP 2 only unless asked"
    optional = "it only decides whether models turn fusion on by themselves; the launch flag still does"
    edits = Edit.OR_TERM
    place = AUTO_ENABLE
    role = Role(
        "the model auto-enable (turns the fusion on under the fusion's SM clause)",
        words=("is_sm", "flashinfer_allreduce_fusion"),
        matches=is_auto_enable,
    )
    anchors = (
        Anchor(
            OVERRIDES,
            "_flashinfer_allreduce_fusion_auto_enable",
            Releases("0.5.15"),
            note="returns {'flashinfer_allreduce_fusion_backend': 'auto'}",
        ),
        Anchor(SERVER_ARGS, ADJUSTMENTS, Releases("0.5.8", "0.5.14"), cls=SERVER_ARGS_CLASS),
        Anchor(
            SERVER_ARGS,
            ADJUSTMENTS,
            Releases("0.5.4.post2", "0.5.7"),
            cls=SERVER_ARGS_CLASS,
            expect=State.NOT_NEEDED,
            note="is_blackwell_supported() already admits SM12x",
        ),
        Anchor(
            SERVER_ARGS,
            ADJUSTMENTS,
            Releases("0.5.4", "0.5.4.post1"),
            cls=SERVER_ARGS_CLASS,
            note="GPT-OSS `if is_sm100_supported():`; the DeepSeek block is left alone",
        ),
    )
    examples = (
        Example(
            "server_args.py, helper spelling, import added (0.5.8 - 0.5.13)",
            """
            from sglang.srt.utils.common import is_sm90_supported, is_sm100_supported
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if (
                        not self.enable_flashinfer_allreduce_fusion
                        and (is_sm90_supported() or is_sm100_supported())
                        and self.nnodes == 1
                    ):
                        self.enable_flashinfer_allreduce_fusion = True
                    if is_sm100_supported():
                        self.attention_backend = 'trtllm_mha'
            """,
            after="""
            from sglang.srt.utils.common import is_sm90_supported, is_sm100_supported, is_sm120_supported
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if (
                        not self.enable_flashinfer_allreduce_fusion
                        and (is_sm90_supported() or is_sm100_supported() or (is_sm120_supported() and self.tp_size == 2))
                        and self.nnodes == 1
                    ):
                        self.enable_flashinfer_allreduce_fusion = True
                    if is_sm100_supported():
                        self.attention_backend = 'trtllm_mha'
            """,
            detail=(
                "ServerArgs._handle_model_specific_adjustments: will widen (is_sm90_supported() or"
                " is_sm100_supported()) with (is_sm120_supported() and self.tp_size == 2) and import is_sm120_supported from"
                " sglang.srt.utils.common"
            ),
            evidence=(6,),
        ),
        Example(
            "overrides.py, platform spelling; the multi-node clause stays (0.5.19+)",
            """
            def _flashinfer_allreduce_fusion_auto_enable(view):
                if (
                    view.flashinfer_allreduce_fusion_backend is None
                    and (get_platform().is_sm90 or get_platform().is_sm100)
                    and (view.nnodes == 1 or get_platform().is_sm100)
                ):
                    return {'flashinfer_allreduce_fusion_backend': 'auto'}
                return {}
            """,
            after="""
            def _flashinfer_allreduce_fusion_auto_enable(view):
                if (
                    view.flashinfer_allreduce_fusion_backend is None
                    and (get_platform().is_sm90 or get_platform().is_sm100 or (get_platform().is_sm120 and view.tp_size == 2))
                    and (view.nnodes == 1 or get_platform().is_sm100)
                ):
                    return {'flashinfer_allreduce_fusion_backend': 'auto'}
                return {}
            """,
        ),
        Example(
            "a bare helper call as the whole test (GPT-OSS, 0.5.4)",
            """
            from sglang.srt.utils import is_sm100_supported
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if is_sm100_supported():
                        if not self.enable_dp_attention:
                            self.enable_flashinfer_allreduce_fusion = True
            """,
            after="""
            from sglang.srt.utils import is_sm100_supported, is_sm120_supported
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if is_sm100_supported() or (is_sm120_supported() and self.tp_size == 2):
                        if not self.enable_dp_attention:
                            self.enable_flashinfer_allreduce_fusion = True
            """,
        ),
        Example(
            "a bare helper call inside an `and` chain gets parentheses",
            """
            from sglang.srt.utils import is_sm100_supported
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if self.tp_size > 1 and is_sm100_supported() and not self.enable_dp_attention:
                        self.enable_flashinfer_allreduce_fusion = True
            """,
            after="""
            from sglang.srt.utils import is_sm100_supported, is_sm120_supported
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if self.tp_size > 1 and (is_sm100_supported() or (is_sm120_supported() and self.tp_size == 2)) and not self.enable_dp_attention:
                        self.enable_flashinfer_allreduce_fusion = True
            """,
        ),
        Example(
            "two model blocks, each widened",
            """
            from sglang.srt.utils import is_sm90_supported, is_sm100_supported
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if model_arch in ["Glm4MoeForCausalLM"] and (is_sm90_supported() or is_sm100_supported()):
                        self.enable_flashinfer_allreduce_fusion = True
                    if model_arch in ["Qwen3MoeForCausalLM"] and (is_sm90_supported() or is_sm100_supported()):
                        self.enable_flashinfer_allreduce_fusion = True
            """,
            after="""
            from sglang.srt.utils import is_sm90_supported, is_sm100_supported, is_sm120_supported
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if model_arch in ["Glm4MoeForCausalLM"] and (is_sm90_supported() or is_sm100_supported() or (is_sm120_supported() and self.tp_size == 2)):
                        self.enable_flashinfer_allreduce_fusion = True
                    if model_arch in ["Qwen3MoeForCausalLM"] and (is_sm90_supported() or is_sm100_supported() or (is_sm120_supported() and self.tp_size == 2)):
                        self.enable_flashinfer_allreduce_fusion = True
            """,
        ),
        Example(
            "the auto-enable in an `else`; the SM check that turns fusion off stays",
            """
            from sglang.srt.utils import is_sm90_supported, is_sm100_supported
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if self.enable_dp_attention and is_sm100_supported():
                        self.enable_flashinfer_allreduce_fusion = False
                    else:
                        if (is_sm90_supported() or is_sm100_supported()) and self.nnodes == 1:
                            self.enable_flashinfer_allreduce_fusion = True
            """,
            after="""
            from sglang.srt.utils import is_sm90_supported, is_sm100_supported, is_sm120_supported
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if self.enable_dp_attention and is_sm100_supported():
                        self.enable_flashinfer_allreduce_fusion = False
                    else:
                        if (is_sm90_supported() or is_sm100_supported() or (is_sm120_supported() and self.tp_size == 2)) and self.nnodes == 1:
                            self.enable_flashinfer_allreduce_fusion = True
            """,
        ),
        Example(
            "the backend set to 'auto' is widened; the one reset to None stays",
            """
            from sglang.srt.utils import is_sm90_supported, is_sm100_supported
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if (is_sm90_supported() or is_sm100_supported()) and self.flashinfer_allreduce_fusion_backend is None:
                        self.flashinfer_allreduce_fusion_backend = "auto"
                    if is_sm100_supported() and self.nnodes > 1 and not self.enable_mnnvl:
                        self.flashinfer_allreduce_fusion_backend = None
            """,
            after="""
            from sglang.srt.utils import is_sm90_supported, is_sm100_supported, is_sm120_supported
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if (is_sm90_supported() or is_sm100_supported() or (is_sm120_supported() and self.tp_size == 2)) and self.flashinfer_allreduce_fusion_backend is None:
                        self.flashinfer_allreduce_fusion_backend = "auto"
                    if is_sm100_supported() and self.nnodes > 1 and not self.enable_mnnvl:
                        self.flashinfer_allreduce_fusion_backend = None
            """,
        ),
        Example(
            "overrides.py returns a backend chosen earlier (0.5.15+)",
            """
            def _flashinfer_allreduce_fusion_auto_enable(view):
                backend = "trtllm" if view.nnodes == 1 else "mnnvl"
                if get_platform().is_sm90 or get_platform().is_sm100:
                    return {"flashinfer_allreduce_fusion_backend": backend}
                return {}
            """,
            after="""
            def _flashinfer_allreduce_fusion_auto_enable(view):
                backend = "trtllm" if view.nnodes == 1 else "mnnvl"
                if get_platform().is_sm90 or get_platform().is_sm100 or (get_platform().is_sm120 and view.tp_size == 2):
                    return {"flashinfer_allreduce_fusion_backend": backend}
                return {}
            """,
        ),
        Example(
            "upstream already admits SM12x; the DeepSeek block is left alone (0.5.4.post2 - 0.5.6)",
            """
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if is_cuda() and is_sm100_supported():
                        self.attention_backend = 'trtllm_mla'
                        if not self.enable_dp_attention:
                            self.enable_flashinfer_allreduce_fusion = True
                    if is_blackwell_supported():
                        self.enable_flashinfer_allreduce_fusion = True
            """,
            state=State.NOT_NEEDED,
            detail="already admits SM12x",
        ),
        Example(
            "overrides that also pick other backends are left alone",
            """
            def _flashinfer_allreduce_fusion_auto_enable(view):
                if get_platform().is_sm100 and view.model_arch == "DeepseekV3ForCausalLM":
                    return {"flashinfer_allreduce_fusion_backend": "auto", "attention_backend": "trtllm_mla"}
                if get_platform().is_sm90 and view.model_arch == "Qwen3MoeForCausalLM":
                    return {**QWEN3_MOE_OVERRIDES, "flashinfer_allreduce_fusion_backend": "auto"}
                return {}
            """,
            state=State.NOT_NEEDED,
            detail=(
                "_flashinfer_allreduce_fusion_auto_enable: fusion is only auto-enabled inside blocks that also"
                " choose SM100-only kernels (get_platform().is_sm100; get_platform().is_sm90); left alone,"
                " pass the fusion flag instead"
            ),
        ),
        Example(
            "a block that also resizes the CUDA graphs is left alone",
            """
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if model_arch in ["DeepseekV3ForCausalLM"] and is_sm100_supported():
                        self.cuda_graph_max_bs *= 2
                        self.enable_flashinfer_allreduce_fusion = True
            """,
            state=State.NOT_NEEDED,
            detail="(is_sm100_supported()); left alone",
        ),
        Example(
            "the TP 2 form reads as applied",
            """
            def _flashinfer_allreduce_fusion_auto_enable(view):
                if (get_platform().is_sm90 or get_platform().is_sm100 or (get_platform().is_sm120 and view.tp_size == 2)) and view.tp_size > 1:
                    return {"flashinfer_allreduce_fusion_backend": "auto"}
                return {}
            """,
            state=State.APPLIED,
            detail="(get_platform().is_sm120 and view.tp_size == 2)",
        ),
        Example(
            "a bare SM120 term (the `sed`, or --auto-enable-tp any) reads as applied",
            """
            from sglang.srt.utils import is_sm90_supported, is_sm100_supported, is_sm120_supported
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if (is_sm90_supported() or is_sm100_supported() or is_sm120_supported()) and self.tp_size > 1:
                        self.enable_flashinfer_allreduce_fusion = True
            """,
            state=State.APPLIED,
            detail="(is_sm90_supported() or is_sm100_supported() or is_sm120_supported())",
        ),
        Example(
            "--auto-enable-tp any widens at any TP",
            """
            def _flashinfer_allreduce_fusion_auto_enable(view):
                if (get_platform().is_sm90 or get_platform().is_sm100) and view.tp_size > 1:
                    return {"flashinfer_allreduce_fusion_backend": "auto"}
                return {}
            """,
            after="""
            def _flashinfer_allreduce_fusion_auto_enable(view):
                if (get_platform().is_sm90 or get_platform().is_sm100 or get_platform().is_sm120) and view.tp_size > 1:
                    return {"flashinfer_allreduce_fusion_backend": "auto"}
                return {}
            """,
            auto_enable_any_tp=True,
        ),
        Example(
            "--auto-enable-tp any drops the TP conjunct an earlier apply wrote",
            """
            from sglang.srt.utils import is_sm90_supported, is_sm100_supported, is_sm120_supported
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if (is_sm90_supported() or is_sm100_supported() or (is_sm120_supported() and self.tp_size == 2)) and self.tp_size > 1:
                        self.enable_flashinfer_allreduce_fusion = True
            """,
            after="""
            from sglang.srt.utils import is_sm90_supported, is_sm100_supported, is_sm120_supported
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if (is_sm90_supported() or is_sm100_supported() or is_sm120_supported()) and self.tp_size > 1:
                        self.enable_flashinfer_allreduce_fusion = True
            """,
            detail=(
                "ServerArgs._handle_model_specific_adjustments: auto-enable at any TP: will drop the TP conjunct"
                " of (is_sm120_supported() and self.tp_size == 2)"
            ),
            auto_enable_any_tp=True,
        ),
        Example(
            "--auto-enable-tp 2 limits a bare SM120 term to TP 2",
            """
            def _flashinfer_allreduce_fusion_auto_enable(view):
                if (get_platform().is_sm90 or get_platform().is_sm100 or get_platform().is_sm120) and view.tp_size > 1:
                    return {"flashinfer_allreduce_fusion_backend": "auto"}
                return {}
            """,
            after="""
            def _flashinfer_allreduce_fusion_auto_enable(view):
                if (get_platform().is_sm90 or get_platform().is_sm100 or (get_platform().is_sm120 and view.tp_size == 2)) and view.tp_size > 1:
                    return {"flashinfer_allreduce_fusion_backend": "auto"}
                return {}
            """,
            detail=(
                "_flashinfer_allreduce_fusion_auto_enable: auto-enable at TP 2 only: will limit"
                " get_platform().is_sm120 to TP 2"
            ),
            auto_enable_any_tp=False,
        ),
        Example(
            "no parameter names the TP size",
            """
            def _flashinfer_allreduce_fusion_auto_enable():
                if get_platform().is_sm90 or get_platform().is_sm100:
                    return {"flashinfer_allreduce_fusion_backend": "auto"}
                return {}
            """,
            state=State.DRIFT,
            detail="no parameter holds the TP size",
        ),
        Example(
            "sglang.srt.utils lacks is_sm120_supported",
            """
            from sglang.srt.utils import is_sm100_supported
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if is_sm100_supported():
                        self.enable_flashinfer_allreduce_fusion = True
            """,
            state=State.DRIFT,
            detail="does not define is_sm120_supported",
            undefined=("is_sm120_supported",),
        ),
        Example(
            "nothing turns fusion on under an SM check",
            """
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if self.enable_flashinfer_allreduce_fusion:
                        pass
            """,
            state=State.DRIFT,
            detail=(
                "no `if` in ServerArgs._handle_model_specific_adjustments that turns fusion on under an SM"
                " check like (is_sm90_supported() or is_sm100_supported())"
            ),
        ),
        Example(
            "fusion is on for every GPU; the SM check only turns it off",
            """
            def _flashinfer_allreduce_fusion_auto_enable(view):
                if get_platform().is_sm100 and view.enable_dp_attention:
                    return {"flashinfer_allreduce_fusion_backend": None}
                return {"flashinfer_allreduce_fusion_backend": "auto"}
            """,
            state=State.DRIFT,
            detail=(
                "no `if` in _flashinfer_allreduce_fusion_auto_enable that turns fusion on under an SM check"
                " like (is_sm90_supported() or is_sm100_supported())"
            ),
        ),
        Example(
            "a hand edit that added the SM120 check as a second conjunct",
            """
            from sglang.srt.utils import is_sm90_supported, is_sm100_supported, is_sm120_supported
            class ServerArgs:
                def _handle_model_specific_adjustments(self):
                    if (is_sm90_supported() or is_sm100_supported()) and is_sm120_supported():
                        self.enable_flashinfer_allreduce_fusion = True
            """,
            state=State.DRIFT,
            detail="ServerArgs._handle_model_specific_adjustments: an auto-enable test has 2 SM clauses; expected one",
        ),
        Example(
            "the adjustments method renamed",
            """
            class ServerArgs:
                def _apply_model_defaults(self):
                    if is_sm100_supported():
                        self.enable_flashinfer_allreduce_fusion = True
            """,
            state=State.DRIFT,
            detail="the auto-enable moved: found none of function _flashinfer_allreduce_fusion_auto_enable",
        ),
    )

    def check(self, module: cst.Module, ctx: PatchContext) -> Finding:
        rows = ctx.rows_of(self)
        found = find_anchored(module, rows)
        if not found:
            return Finding(State.DRIFT, f"the auto-enable moved: found none of {searched(rows)}")
        functions = {id(f): (a, f) for a, f in found}
        where = ", ".join(dict.fromkeys(label(a) for a, _ in functions.values()))
        gates: dict[int, tuple[cst.If, _Gate]] = {}
        for _, function in functions.values():
            for chain in _enables(function):
                for node in reversed(chain):
                    clauses = [(c, g) for c, g in _clauses_in_test(node.test) if not c.negated]
                    if not clauses:
                        continue
                    if len(clauses) > 1:
                        return Finding(
                            State.DRIFT,
                            f"{where}: an auto-enable test has {len(clauses)} SM clauses; expected one",
                            where,
                        )
                    gates[id(node)] = (node, _Gate(*clauses[0], _receiver(function)))
                    break
        if not gates:
            return Finding(
                State.DRIFT,
                f"no `if` in {where} that turns fusion on under an SM check like "
                "(is_sm90_supported() or is_sm100_supported())",
                where,
            )
        # Blocks that also choose SM100-only kernels are never widened.
        eligible = [g for node, g in gates.values() if admits_sm12x(g.clause.terms) or _only_fusion(node.body)]
        if not eligible:
            mixed = "; ".join(describe(g.clause.terms) for _, g in gates.values())
            return Finding(
                State.NOT_NEEDED,
                f"{where}: fusion is only auto-enabled inside blocks that also choose SM100-only "
                f"kernels ({mixed}); left alone, pass the fusion flag instead",
                where,
            )
        scopes = [f for _, f in functions.values()]
        any_tp = bool(ctx.auto_enable_any_tp)
        receivers = {id(g.clause.node): g.receiver for g in eligible}
        if not any_tp and None in (receivers[id(g.clause.node)] for g in eligible if not admits_sm12x(g.clause.terms)):
            return Finding(State.DRIFT, f"{where}: no parameter holds the TP size to limit the auto-enable to", where)

        def shape(clause: Clause, term: cst.BaseExpression) -> cst.BaseExpression:
            receiver = receivers[id(clause.node)]
            return term if any_tp or receiver is None else _tp_gated(term, receiver)

        sm_clauses = [g.clause for g in eligible]
        finding = decide(module, ctx, sm_clauses, where, [c.node for c in sm_clauses], scopes, shape)
        if finding.state is not State.APPLIED:
            return finding
        if ctx.auto_enable_any_tp is not None:  # neither form asked: either one is applied
            reshaped = self._reshape(finding, eligible, any_tp, where, scopes)
            if reshaped is not None:
                return reshaped
        free = any(names_sm120([t]) and id(t.node) not in _gated_nodes(g) for g in eligible for t in g.clause.terms)
        finding.detail += f" ({AT_ANY if free else AT_TP2})"
        return finding

    @staticmethod
    def _reshape(
        applied: Finding, gates: list[_Gate], any_tp: bool, where: str, scopes: list[cst.FunctionDef]
    ) -> Finding | None:
        """Pending the other way where the applied clauses are not in the form asked
        (``apply --auto-enable-tp``); None where they are."""
        pairs: list[tuple[cst.CSTNode, cst.CSTNode]] = []
        for gate in gates:
            if any_tp:
                pairs += [(o, o.left) for o in gate.gated]
                continue
            bare = [t.node for t in gate.clause.terms if names_sm120([t]) and id(t.node) not in _gated_nodes(gate)]
            if bare and gate.receiver is not None:
                pairs += [(t, _tp_gated(t, gate.receiver)) for t in bare]
        if not pairs:
            return None
        shown = "; ".join(code(old) for old, _ in pairs)
        change = (
            f"auto-enable at any TP: will drop the TP conjunct of {shown}"
            if any_tp
            else f"auto-enable at TP {SAFE_TP} only: will limit {shown} to TP {SAFE_TP}"
        )

        def apply(tree: cst.Module) -> cst.Module:
            return replace_all(tree, pairs, scopes)

        return Finding(State.PENDING, f"{where}: {change}", where, applied.evidence, apply, scopes)
