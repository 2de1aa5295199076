"""server-args-auto-enable: let the model auto-enable of fusion consider SM12x."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

import libcst as cst

from sm120patch.cst_helpers import find_functions, iter_children, walk
from sm120patch.registry import Example, Finding, Patch, PatchContext, State
from sm120patch.sm_terms import Clause, admits_sm12x, clauses_in_test, describe, has_sm120_term
from sm120patch.targets import auto_enable_module
from sm120patch.widening import applied_or_missing_import, widen_clauses

AUTO_ENABLE_FUNCTIONS = (
    "_flashinfer_allreduce_fusion_auto_enable",  # arg_groups/overrides.py, 0.5.15+
    "_handle_model_specific_adjustments",  # ServerArgs, 0.5.3 - 0.5.14
    "model_specific_adjustments",  # ServerArgs, 0.5.1 - 0.5.2
)
FUSION_FIELDS = ("enable_flashinfer_allreduce_fusion", "flashinfer_allreduce_fusion_backend")


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
            for key, element in zip(_dict_keys(node.value), node.value.elements)
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
            targets = (
                [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            )
            for target in targets:
                if isinstance(target, cst.Attribute) and target.attr.value not in FUSION_FIELDS:
                    return False
        if isinstance(node, cst.Return) and isinstance(node.value, cst.Dict):
            if any(key not in FUSION_FIELDS for key in _dict_keys(node.value)):
                return False
    return True


class ServerArgsAutoEnable(Patch):
    """Widen the SM clause of the ``if`` that auto-enables fusion for supported models.

    Why: for DeepSeek-V3, GLM-4.x MoE, Qwen3 MoE, GPT-OSS, Kimi K2.5 and others sglang
    turns fusion on by itself when ``(is_sm90_supported() or is_sm100_supported())``.  On
    SM12x it never does, so users had to know the flag.  Only the SM clause of the ``if``
    whose body does nothing but turn fusion on is widened; other clauses in the same test
    (``(self.nnodes == 1 or is_sm100_supported())``, the multi-node MNNVL choice) and every
    other SM100 check in the file stay as they are.  Blocks that also pick SM100-only
    kernels (the DeepSeek blocks of 0.5.3.post2 - 0.5.6) are left alone.  Where upstream
    already admits SM12x (``is_blackwell_supported()``: GPT-OSS in 0.5.4.post2 - 0.5.6,
    every model in 0.5.7) the patch is not needed.

    Where: ``ServerArgs._handle_model_specific_adjustments`` in ``server_args.py``
    (0.5.4 - 0.5.14; ``enable_flashinfer_allreduce_fusion = True`` up to 0.5.13.post1,
    ``flashinfer_allreduce_fusion_backend = "auto"`` in 0.5.14), then
    ``arg_groups/overrides.py::_flashinfer_allreduce_fusion_auto_enable`` (0.5.15+,
    ``get_platform()`` spelling from 0.5.19).  ``is_sm120_supported`` is imported if the
    file lacks it.

    Remove when: upstream auto-enables on SM12x (no release does, through 0.5.23).
    """

    id = "server-args-auto-enable"
    summary = "widen the model auto-enable's SM clause with is_sm120_supported()"
    examples = (
        Example(
            before=(
                "from sglang.srt.utils.common import is_sm90_supported, is_sm100_supported\n"
                "class ServerArgs:\n"
                "    def _handle_model_specific_adjustments(self):\n"
                "        if (\n"
                "            not self.enable_flashinfer_allreduce_fusion\n"
                "            and (is_sm90_supported() or is_sm100_supported())\n"
                "            and self.nnodes == 1\n"
                "        ):\n"
                "            self.enable_flashinfer_allreduce_fusion = True\n"
                "        if is_sm100_supported():\n"
                "            self.attention_backend = 'trtllm_mha'\n"
            ),
            after=(
                "from sglang.srt.utils.common import is_sm90_supported, is_sm100_supported, is_sm120_supported\n"
                "class ServerArgs:\n"
                "    def _handle_model_specific_adjustments(self):\n"
                "        if (\n"
                "            not self.enable_flashinfer_allreduce_fusion\n"
                "            and (is_sm90_supported() or is_sm100_supported() or is_sm120_supported())\n"
                "            and self.nnodes == 1\n"
                "        ):\n"
                "            self.enable_flashinfer_allreduce_fusion = True\n"
                "        if is_sm100_supported():\n"
                "            self.attention_backend = 'trtllm_mha'\n"
            ),
        ),
        Example(
            before=(
                "def _flashinfer_allreduce_fusion_auto_enable(view):\n"
                "    if (\n"
                "        view.flashinfer_allreduce_fusion_backend is None\n"
                "        and (get_platform().is_sm90 or get_platform().is_sm100)\n"
                "        and (view.nnodes == 1 or get_platform().is_sm100)\n"
                "    ):\n"
                "        return {'flashinfer_allreduce_fusion_backend': 'auto'}\n"
                "    return {}\n"
            ),
            after=(
                "def _flashinfer_allreduce_fusion_auto_enable(view):\n"
                "    if (\n"
                "        view.flashinfer_allreduce_fusion_backend is None\n"
                "        and (get_platform().is_sm90 or get_platform().is_sm100 or get_platform().is_sm120)\n"
                "        and (view.nnodes == 1 or get_platform().is_sm100)\n"
                "    ):\n"
                "        return {'flashinfer_allreduce_fusion_backend': 'auto'}\n"
                "    return {}\n"
            ),
        ),
        Example(
            before=(
                "from sglang.srt.utils import is_sm100_supported\n"
                "class ServerArgs:\n"
                "    def _handle_model_specific_adjustments(self):\n"
                "        if is_sm100_supported():\n"
                "            if not self.enable_dp_attention:\n"
                "                self.enable_flashinfer_allreduce_fusion = True\n"
            ),
            after=(
                "from sglang.srt.utils import is_sm100_supported, is_sm120_supported\n"
                "class ServerArgs:\n"
                "    def _handle_model_specific_adjustments(self):\n"
                "        if is_sm100_supported() or is_sm120_supported():\n"
                "            if not self.enable_dp_attention:\n"
                "                self.enable_flashinfer_allreduce_fusion = True\n"
            ),
        ),
        Example(
            before=(
                "class ServerArgs:\n"
                "    def _handle_model_specific_adjustments(self):\n"
                "        if is_cuda() and is_sm100_supported():\n"
                "            self.attention_backend = 'trtllm_mla'\n"
                "            if not self.enable_dp_attention:\n"
                "                self.enable_flashinfer_allreduce_fusion = True\n"
                "        if is_blackwell_supported():\n"
                "            self.enable_flashinfer_allreduce_fusion = True\n"
            ),
            state=State.NOT_NEEDED,
            detail="already admits SM12x",
        ),
        Example(
            before=(
                "class ServerArgs:\n"
                "    def _handle_model_specific_adjustments(self):\n"
                "        if self.enable_flashinfer_allreduce_fusion:\n"
                "            pass\n"
            ),
            state=State.DRIFT,
            detail="turns fusion on",
        ),
    )

    def target(self, exists: Callable[[str], bool]) -> str:
        return auto_enable_module(exists)

    def check(self, module: cst.Module, ctx: PatchContext) -> Finding:
        functions = find_functions(module, AUTO_ENABLE_FUNCTIONS)
        if not functions:
            return Finding(
                State.DRIFT,
                f"no function {' / '.join(AUTO_ENABLE_FUNCTIONS)}: the auto-enable moved",
            )
        gates: dict[int, tuple[cst.If, Clause, str]] = {}
        for function in functions:
            for chain in _enables(function):
                for node in reversed(chain):
                    clauses = [c for c in clauses_in_test(node.test) if not c.negated]
                    if not clauses:
                        continue
                    if len(clauses) > 1:
                        return Finding(
                            State.DRIFT,
                            f"{function.name.value}: an auto-enable test has {len(clauses)} SM "
                            "clauses; expected one",
                            function.name.value,
                        )
                    gates[id(node)] = (node, clauses[0], function.name.value)
                    break
        if not gates:
            return Finding(
                State.DRIFT,
                f"no `if` in {' / '.join(f.name.value for f in functions)} that turns fusion on "
                "under an SM check like (is_sm90_supported() or is_sm100_supported())",
            )
        where = ", ".join(sorted({name for _, _, name in gates.values()}))
        pending = [c for node, c, _ in gates.values() if not admits_sm12x(c.probes) and _only_fusion(node.body)]
        mixed = [c for node, c, _ in gates.values() if not admits_sm12x(c.probes) and not _only_fusion(node.body)]
        upstream = [c for _, c, _ in gates.values() if admits_sm12x(c.probes) and not has_sm120_term(c.probes)]
        applied = [c for _, c, _ in gates.values() if has_sm120_term(c.probes)]
        evidence = [c.node for c in (*pending, *applied, *upstream)]
        if pending:
            return widen_clauses(module, ctx, pending, where, evidence)
        if applied:
            return applied_or_missing_import(module, applied, where, evidence)
        if upstream:
            return Finding(
                State.NOT_NEEDED,
                f"{where} already admits SM12x: {'; '.join(describe(c.probes) for c in upstream)}",
                where,
                evidence,
            )
        return Finding(
            State.NOT_NEEDED,
            f"{where}: fusion is only auto-enabled inside blocks that also choose SM100-only "
            f"kernels ({'; '.join(describe(c.probes) for c in mixed)}); left alone, pass "
            "--enable-flashinfer-allreduce-fusion instead",
            where,
        )
