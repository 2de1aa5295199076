"""communicator-flag: cache ``_is_sm120_supported`` beside ``_is_sm100_supported``."""

from __future__ import annotations

import libcst as cst

from sm120patch.patcher.kit.cst_helpers import code, module_assignments, replace_all
from sm120patch.patcher.kit.decide import anchored_names, find_assigned
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
from sm120patch.patcher.kit.role_shapes import sm_flag_read
from sm120patch.patcher.kit.sm_terms import FLAG, first_sm_term, sm120_term, sm_terms_in
from sm120patch.sglang.layout import ADD_NORM, COMMUNICATOR, GATE, SM120_FLAG

NAME = SM120_FLAG
SM100 = "_is_sm100_supported"  # the anchor rows' name: check() reads the rows


class CommunicatorFlag(Patch):
    """Add ``_is_sm120_supported = <same shape as the SM100 flag>`` after the SM100 flag.

    Why: the fusion gate reads module-level flags computed once at import
    (``_is_sm100_supported = _is_cuda and is_sm100_supported()``); the widened gate
    (communicator-fusion-gate) needs the SM120 one.  The right-hand side is derived from
    the SM100 line by swapping only the SM term, so every release's spelling is kept:
    ``is_cuda() and is_sm120_supported()`` (0.5.4 - 0.5.5.post2), ``_is_cuda and
    is_sm120_supported()`` (0.5.5.post3 - 0.5.18), ``_is_cuda and get_platform().is_sm120``
    (0.5.19+).  ``is_sm120_supported`` is major 12 with CUDA >= 12.8, so SM121 (GB10) too.
    A flag added by hand (the ``sed`` of the original fix) counts as applied; duplicates
    are reported.  Not needed where the module caches no SM flags at all (a gate that
    tests ``get_platform()`` inline).

    Remove when: upstream's gate admits SM12x.
    """

    id = "communicator-flag"
    summary = "cache _is_sm120_supported right after _is_sm100_supported, same shape"
    edits = Edit.FLAG
    requires = ("communicator-import",)
    provides = (NAME,)
    place = GATE
    role = Role(
        "the SM flags the fusion gate reads",
        follows="communicator-fusion-gate",
        reads=sm_flag_read,
        kind=Kind.ASSIGNMENT,
    )
    anchors = (
        Anchor(ADD_NORM, SM100, Releases("0.5.21"), kind=Kind.ASSIGNMENT),
        Anchor(COMMUNICATOR, SM100, Releases("0.5.4", "0.5.20"), kind=Kind.ASSIGNMENT),
    )
    examples = (
        Example(
            "helper spelling (0.5.5.post3 - 0.5.18)",
            """
            _is_sm90_supported = _is_cuda and is_sm90_supported()
            _is_sm100_supported = _is_cuda and is_sm100_supported()
            _use_aiter = False
            """,
            after="""
            _is_sm90_supported = _is_cuda and is_sm90_supported()
            _is_sm100_supported = _is_cuda and is_sm100_supported()
            _is_sm120_supported = _is_cuda and is_sm120_supported()
            _use_aiter = False
            """,
            detail=(
                "will add `_is_sm120_supported = _is_cuda and is_sm120_supported()`"
                " after `_is_sm100_supported = _is_cuda and is_sm100_supported()`"
            ),
            evidence=(1, 2, 3),
        ),
        Example(
            "platform spelling (0.5.19+)",
            "_is_sm100_supported = _is_cuda and get_platform().is_sm100\n",
            after="""
            _is_sm100_supported = _is_cuda and get_platform().is_sm100
            _is_sm120_supported = _is_cuda and get_platform().is_sm120
            """,
        ),
        Example(
            "comments stay with the SM100 flag, not copied to the new line",
            """
            _is_sm90_supported = _is_cuda and is_sm90_supported()

            # Blackwell (B200/GB200) fuses allreduce with the residual RMSNorm
            _is_sm100_supported = _is_cuda and is_sm100_supported()  # cached at import
            """,
            after="""
            _is_sm90_supported = _is_cuda and is_sm90_supported()

            # Blackwell (B200/GB200) fuses allreduce with the residual RMSNorm
            _is_sm100_supported = _is_cuda and is_sm100_supported()  # cached at import
            _is_sm120_supported = _is_cuda and is_sm120_supported()
            """,
        ),
        Example(
            "the sed of the original fix, run twice",
            """
            _is_sm100_supported = _is_cuda and is_sm100_supported()
            _is_sm120_supported = _is_cuda and is_sm120_supported()
            _is_sm120_supported = _is_cuda and is_sm120_supported()
            """,
            state=State.APPLIED,
            detail="_is_sm120_supported is assigned 2 times (a hand edit run twice?); harmless, left as is",
            evidence=(1, 2, 3),
        ),
        Example(
            "no SM100 flag next to other flags",
            "_is_sm90_supported = _is_cuda and is_sm90_supported()\n",
            state=State.DRIFT,
            detail="expected one module-level `_is_sm100_supported = ...`, found 0",
        ),
        Example(
            "two SM100 flags: which one?",
            """
            _is_sm100_supported = _is_cuda and is_sm100_supported()
            _is_sm100_supported = is_cuda() and is_sm100_supported()
            """,
            state=State.DRIFT,
            detail="found 2",
        ),
        Example(
            "a hand edit that put another flag on the SM100 line",
            "_is_sm90_supported = _is_cuda and is_sm90_supported(); _is_sm100_supported = _is_cuda and is_sm100_supported()\n",
            state=State.DRIFT,
            detail=(
                "`_is_sm90_supported = _is_cuda and is_sm90_supported(); "
                "_is_sm100_supported = _is_cuda and is_sm100_supported()` is not a plain single assignment"
            ),
        ),
        Example(
            "an annotated SM100 flag",
            "_is_sm100_supported: bool = _is_cuda and is_sm100_supported()\n",
            state=State.DRIFT,
            detail="`_is_sm100_supported: bool = _is_cuda and is_sm100_supported()` is not a plain single assignment",
        ),
        Example(
            "an SM100 flag read from the compute capability",
            "_is_sm100_supported = _is_cuda and torch.cuda.get_device_capability()[0] == 10\n",
            state=State.DRIFT,
            detail=(
                "`_is_sm100_supported = _is_cuda and torch.cuda.get_device_capability()[0] == 10`:"
                " expected exactly one SM100 term on the right-hand side"
            ),
        ),
        Example(
            "a gate that tests get_platform() inline caches no flags",
            """
            def flashinfer_ar_fusion_applies(batch_size):
                return (get_platform().is_sm90 or get_platform().is_sm100) and batch_size > 0
            """,
            state=State.NOT_NEEDED,
            detail="no cached _is_smXX_supported flags here: the gate tests its terms inline",
        ),
    )

    def check(self, module: cst.Module, ctx: PatchContext) -> Finding:
        rows = ctx.rows_of(self)
        anchored = anchored_names(rows, Kind.ASSIGNMENT)
        flags = [line for name in ("_is_sm90_supported", *anchored, NAME) for line in module_assignments(module, name)]
        existing = module_assignments(module, NAME)
        if existing:
            detail = f"{NAME} is assigned"
            if len(existing) > 1:
                detail += f" {len(existing)} times (a hand edit run twice?); harmless, left as is"
            return Finding(State.APPLIED, detail, evidence=flags)
        sm100 = [line for _, line in find_assigned(module, rows)]
        if not sm100 and first_sm_term(module, FLAG) is None:
            return Finding(State.NOT_NEEDED, "no cached _is_smXX_supported flags here: the gate tests its terms inline")
        if len(sm100) != 1:
            shown = " or ".join(f"`{name} = ...`" for name in anchored)
            return Finding(State.DRIFT, f"expected one module-level {shown}, found {len(sm100)}")
        line = sm100[0]
        assign = line.body[0] if len(line.body) == 1 else None
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            return Finding(State.DRIFT, f"`{code(line)}` is not a plain single assignment")
        terms = [t for t in sm_terms_in(assign.value) if t.arch == "sm100"]
        if len(terms) != 1:
            return Finding(State.DRIFT, f"`{code(line)}`: expected exactly one SM100 term on the right-hand side")
        value = assign.value.deep_replace(terms[0].node, sm120_term(terms[0]))  # a one-line expression
        new_line = line.with_changes(
            body=[assign.with_changes(targets=[assign.targets[0].with_changes(target=cst.Name(NAME))], value=value)],
            leading_lines=(),
            trailing_whitespace=cst.TrailingWhitespace(newline=line.trailing_whitespace.newline),
        )
        return Finding(
            State.PENDING,
            f"will add `{code(new_line)}` after `{code(line)}`",
            evidence=flags,
            apply=lambda tree: replace_all(tree, [(line, cst.FlattenSentinel([line, new_line]))]),
        )
