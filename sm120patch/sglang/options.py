"""The server options and environment flags that turn fusion (and its neighbours) on and off,
each written once, and which of them one release accepts, read from its code."""

from __future__ import annotations

import ast

from sm120patch.sglang.tree import SglangTree

BACKEND = "--flashinfer-allreduce-fusion-backend"  # 0.5.14+
ENABLE = "--enable-flashinfer-allreduce-fusion"  # up to 0.5.13 (deprecated alias of auto after)
HATCH = "--enforce-disable-flashinfer-allreduce-fusion"  # 0.5.10+: fusion off, auto-enable included
FUSION_OPTIONS = (BACKEND, ENABLE, HATCH)
BACKEND_VALUE = "trtllm"  # never auto or mnnvl: they create multicast objects where GPUs report multicast


def release_options(tree: SglangTree) -> set[str]:
    """The fusion options this release's server accepts, read from its argument code: an
    ``add_argument("--x")`` literal, or a ServerArgs field ``x: ...`` (0.5.14+ derive the
    option from the field, unless it is marked ``no_cli=True``)."""
    fields = {option[2:].replace("-", "_"): option for option in FUSION_OPTIONS}
    options: set[str] = set()
    arg_groups = tree.path("srt/arg_groups")
    files = [tree.path("srt/server_args.py"), *sorted(arg_groups.rglob("*.py"))]
    for path in files:
        try:
            source = path.read_bytes()
            parsed = ast.parse(source)
        except (OSError, SyntaxError, ValueError):  # ValueError: null bytes in the source
            continue
        for node in ast.walk(parsed):
            if isinstance(node, ast.Constant) and node.value in FUSION_OPTIONS:
                options.add(node.value)
            elif (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id in fields
                and "no_cli=True" not in ast.unparse(node.annotation).replace(" ", "")
            ):
                options.add(fields[node.target.id])
    return options


PCIE_IPC_FLAG = "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"  # 0.5.23's opt-in PCIe allreduce (sglang#34528)
PCIE_IPC_MODULE = "srt/distributed/device_communicators/pcie_ipc_ar.py"


def pcie_ipc_option(tree: SglangTree) -> bool:
    """Whether this release has ``SGLANG_ENABLE_PCIE_IPC_ALLREDUCE`` (FlashInfer's PCIe-IPC
    allreduce, sglang#34528, 0.5.23+): the module that implements it is there."""
    return (tree.package_dir / PCIE_IPC_MODULE).is_file()
