"""communicator-import: bring ``is_sm120_supported`` into the fusion-gate module."""

from __future__ import annotations

import libcst as cst

from sm120patch.cst_helpers import (
    binds_at_import,
    bound_name,
    import_froms,
    imported_names,
    replace_all,
    walk,
)
from sm120patch.imports import find_import_site, insert_after
from sm120patch.registry import Example, Finding, PatchContext, State
from sm120patch.sm_terms import Flavor, probe_of
from sm120patch.targets import GateModulePatch
from sm120patch.widening import HELPER_MODULES, PROBE

_SM_NAMES = ("is_sm90_supported", "is_sm100_supported", PROBE)


def _calls_helpers(module: cst.Module) -> bool:
    """Whether anything in the module calls an ``is_smXX_supported()`` helper."""
    return any(
        probe is not None and probe.flavor is Flavor.CALL for probe in map(probe_of, walk(module))
    )


def _import_evidence(module: cst.Module) -> list[cst.CSTNode]:
    return [
        alias
        for imp in import_froms(module)
        for alias in imported_names(imp)
        if bound_name(alias) in _SM_NAMES
    ]


class CommunicatorImport(GateModulePatch):
    """Import ``is_sm120_supported`` where the fusion gate's SM flags are computed.

    Why: ``layers/communicator.py`` caches ``_is_sm90_supported`` and
    ``_is_sm100_supported`` from helpers imported out of ``sglang.srt.utils``; the SM120
    flag (communicator-flag) needs the SM120 helper in the same namespace.  This is the
    first of the three edits of the original hand fix (sglang#18758 did the same).

    Releases: 0.5.4 - 0.5.18 (``is_sm120_supported`` exists from 0.5.4).  From 0.5.19 the
    flags read ``get_platform().is_smXX`` and nothing needs importing: not-needed.
    The name is added on its own line right after ``is_sm100_supported``, after checking
    statically that ``sglang.srt.utils`` really defines it.

    Remove when: upstream's gate admits SM12x (sglang#32330 was closed unmerged).
    """

    id = "communicator-import"
    summary = "import is_sm120_supported next to is_sm100_supported in the fusion-gate module"
    examples = (
        Example(
            before=(
                "from sglang.srt.utils import (\n"
                "    is_cuda,\n"
                "    is_sm90_supported,\n"
                "    is_sm100_supported,\n"
                ")\n"
                "_is_sm100_supported = _is_cuda and is_sm100_supported()\n"
            ),
            after=(
                "from sglang.srt.utils import (\n"
                "    is_cuda,\n"
                "    is_sm90_supported,\n"
                "    is_sm100_supported,\n"
                "    is_sm120_supported,\n"
                ")\n"
                "_is_sm100_supported = _is_cuda and is_sm100_supported()\n"
            ),
        ),
        Example(
            before=(
                "from sglang.srt.utils import (\n"
                "    is_sm100_supported,  # Blackwell\n"
                "    is_npu,\n"
                ")\n"
                "_is_sm100_supported = is_cuda() and is_sm100_supported()\n"
            ),
            after=(
                "from sglang.srt.utils import (\n"
                "    is_sm100_supported,  # Blackwell\n"
                "    is_sm120_supported,\n"
                "    is_npu,\n"
                ")\n"
                "_is_sm100_supported = is_cuda() and is_sm100_supported()\n"
            ),
        ),
        Example(
            before="from sglang.srt.utils import is_cuda, is_sm100_supported, is_sm120_supported\n",
            state=State.APPLIED,
        ),
        Example(
            before=(
                "from sglang.srt.runtime_context import get_platform\n"
                "_is_sm100_supported = _is_cuda and get_platform().is_sm100\n"
            ),
            state=State.NOT_NEEDED,
            detail="get_platform()",
        ),
        Example(
            before=(
                "def flashinfer_ar_fusion_applies(batch_size):\n"
                "    return (get_platform().is_sm90 or get_platform().is_sm100) and batch_size > 0\n"
            ),
            state=State.NOT_NEEDED,
            detail="get_platform()",
        ),
        Example(
            before=(
                "from sglang.srt.utils import is_cuda\n"
                "from sglang.srt.layers.utils import is_sm100_supported\n"
                "_is_sm100_supported = is_cuda() and is_sm100_supported()\n"
            ),
            state=State.DRIFT,
            detail="is_sm100_supported",
        ),
    )

    def check(self, module: cst.Module, ctx: PatchContext) -> Finding:
        if binds_at_import(module, PROBE):
            return Finding(
                State.APPLIED, f"{PROBE} is imported", evidence=_import_evidence(module)
            )
        if not _calls_helpers(module):
            return Finding(
                State.NOT_NEEDED,
                "no is_smXX_supported() call here: the SM checks read get_platform() (or "
                "cached flags), which already know is_sm120",
            )
        site = find_import_site(module, HELPER_MODULES, "is_sm100_supported")
        if site is None:
            return Finding(
                State.DRIFT,
                "expected a module-level `from sglang.srt.utils import (..., "
                "is_sm100_supported, ...)`; none imports is_sm100_supported",
            )
        if not ctx.defines(site.source, PROBE):
            return Finding(
                State.DRIFT,
                f"{site.source} does not define {PROBE} in {ctx.release} "
                "(it first appears in sglang 0.5.4)",
            )
        return Finding(
            State.PENDING,
            f"will add {PROBE} after is_sm100_supported in `from {site.source} import`",
            evidence=_import_evidence(module),
            apply=lambda tree: replace_all(tree, [(site.node, insert_after(site, PROBE))]),
        )
