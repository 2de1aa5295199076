"""communicator-flag: cache ``_is_sm120_supported`` beside ``_is_sm100_supported``."""

from __future__ import annotations

import libcst as cst

from sm120patch.cst_helpers import code, module_assignments, replace_all, walk
from sm120patch.registry import Example, Finding, PatchContext, State
from sm120patch.sm_terms import Flavor, Probe, probe_of, sm120_term
from sm120patch.targets import GateModulePatch

FLAG = "_is_sm120_supported"


def _sm100_probes(node: cst.CSTNode) -> list[Probe]:
    return [p for p in map(probe_of, walk(node)) if p is not None and p.arch == "sm100"]


class CommunicatorFlag(GateModulePatch):
    """Add ``_is_sm120_supported = <same shape as the SM100 flag>`` after the SM100 flag.

    Why: the fusion gate reads module-level flags computed once at import
    (``_is_sm100_supported = _is_cuda and is_sm100_supported()``); the widened gate
    (communicator-fusion-gate) needs the SM120 one.  The right-hand side is derived from
    the SM100 line by swapping only the probe, so every release's spelling is kept:
    ``is_cuda() and is_sm120_supported()`` (0.5.4-0.5.5.post2), ``_is_cuda and
    is_sm120_supported()`` (0.5.5.post3-0.5.18), ``_is_cuda and get_platform().is_sm120``
    (0.5.19+).  ``is_sm120_supported`` is major 12 with CUDA >= 12.8, so SM121 (GB10) too.

    Releases: 0.5.4 - 0.5.23 (``layers/communicator.py``; ``add_norm.py`` from 0.5.21).
    A flag added by hand (the seed's ``sed``) counts as applied, duplicates are reported.

    Remove when: upstream's gate admits SM12x.
    """

    id = "communicator-flag"
    summary = "cache _is_sm120_supported right after _is_sm100_supported, same shape"
    requires = ("communicator-import",)
    examples = (
        Example(
            before=(
                "_is_sm90_supported = _is_cuda and is_sm90_supported()\n"
                "_is_sm100_supported = _is_cuda and is_sm100_supported()\n"
                "_use_aiter = False\n"
            ),
            after=(
                "_is_sm90_supported = _is_cuda and is_sm90_supported()\n"
                "_is_sm100_supported = _is_cuda and is_sm100_supported()\n"
                "_is_sm120_supported = _is_cuda and is_sm120_supported()\n"
                "_use_aiter = False\n"
            ),
        ),
        Example(
            before="_is_sm100_supported = _is_cuda and get_platform().is_sm100\n",
            after=(
                "_is_sm100_supported = _is_cuda and get_platform().is_sm100\n"
                "_is_sm120_supported = _is_cuda and get_platform().is_sm120\n"
            ),
        ),
        Example(
            before=(
                "_is_sm100_supported = _is_cuda and is_sm100_supported()\n"
                "_is_sm120_supported = _is_cuda and is_sm120_supported()\n"
                "_is_sm120_supported = _is_cuda and is_sm120_supported()\n"
            ),
            state=State.APPLIED,
            detail="2 times",
        ),
        Example(
            before="_is_sm90_supported = _is_cuda and is_sm90_supported()\n",
            state=State.DRIFT,
            detail="_is_sm100_supported",
        ),
        Example(
            before=(
                "def flashinfer_ar_fusion_applies(batch_size):\n"
                "    return (get_platform().is_sm90 or get_platform().is_sm100) and batch_size > 0\n"
            ),
            state=State.NOT_NEEDED,
            detail="inline",
        ),
    )

    def check(self, module: cst.Module, ctx: PatchContext) -> Finding:
        flags = [
            line
            for name in ("_is_sm90_supported", "_is_sm100_supported", FLAG)
            for line in module_assignments(module, name)
        ]
        existing = module_assignments(module, FLAG)
        if existing:
            detail = f"{FLAG} is assigned"
            if len(existing) > 1:
                detail += f" {len(existing)} times (a hand edit run twice?); harmless, left as is"
            return Finding(State.APPLIED, detail, evidence=flags)
        sm100 = module_assignments(module, "_is_sm100_supported")
        if not sm100 and not any(
            probe is not None and probe.flavor is Flavor.FLAG for probe in map(probe_of, walk(module))
        ):
            return Finding(
                State.NOT_NEEDED,
                "no cached _is_smXX_supported flags here: the gate tests its probes inline",
            )
        if len(sm100) != 1:
            return Finding(
                State.DRIFT,
                f"expected one module-level `_is_sm100_supported = ...`, found {len(sm100)}",
            )
        line = sm100[0]
        assign = line.body[0] if len(line.body) == 1 else None
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            return Finding(State.DRIFT, f"`{code(line)}` is not a plain single assignment")
        probes = _sm100_probes(assign.value)
        if len(probes) != 1:
            return Finding(
                State.DRIFT,
                f"`{code(line)}`: expected exactly one SM100 probe on the right-hand side",
            )
        value = assign.value.deep_replace(probes[0].node, sm120_term(probes[0]))  # a one-line expression
        new_line = line.with_changes(
            body=[
                assign.with_changes(
                    targets=[assign.targets[0].with_changes(target=cst.Name(FLAG))], value=value
                )
            ],
            leading_lines=(),
            trailing_whitespace=cst.TrailingWhitespace(newline=line.trailing_whitespace.newline),
        )
        return Finding(
            State.PENDING,
            f"will add `{code(new_line)}` after `{code(line)}`",
            evidence=flags,
            apply=lambda tree: replace_all(tree, [(line, cst.FlattenSentinel([line, new_line]))]),
        )
