"""Run sglang's own functions, taken from a real release, with fakes of what lies outside Python.

The functions (the workspace size helper, sglang's SM probes, ``ceil_align``, the
``PlatformContext`` of 0.5.19+) are read from the release's files with ``ast`` and executed
as they are.  Only two things are faked, and each fake is named for what it stands for:

* ``FakeTorch``: the GPU's compute capability and CUDA version, as torch reports them;
* ``FakeCudaDriver``: ``cuda.bindings.driver`` on one GPU, with or without multicast.
"""

from __future__ import annotations

import ast
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Optional

MiB = 1 << 20


class FakeTorch:
    """torch as sglang's probes see it: one GPU of ``capability``, CUDA ``cuda``."""

    float32, float16, bfloat16 = "torch.float32", "torch.float16", "torch.bfloat16"

    def __init__(self, capability: tuple[int, int], cuda: str = "12.9") -> None:
        self.cuda = types.SimpleNamespace(
            get_device_capability=lambda device=None: capability,
            is_available=lambda: True,
            is_initialized=lambda: True,  # so get_device_sm() asks torch, not NVML
            current_device=lambda: 0,
        )
        self.version = types.SimpleNamespace(cuda=cuda)


class _Enum:
    def __init__(self, **members: int) -> None:
        self.__dict__.update(members)


@dataclass
class FakeCudaDriver:
    """``cuda.bindings.driver`` for one GPU: the allocation granularity is 2 MiB; without
    multicast (every PCIe RTX PRO 6000 box) ``cuMulticastGetGranularity`` answers
    CUDA_ERROR_NOT_SUPPORTED (801), as the real driver does there."""

    multicast: bool
    alloc_granularity: int = 2 * MiB
    mc_granularity: int = 512 * MiB
    calls: list[str] = field(default_factory=list)

    CUresult = _Enum(CUDA_SUCCESS=0, CUDA_ERROR_NOT_SUPPORTED=801)
    CUmemAllocationGranularity_flags = _Enum(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED=1)
    CUmulticastGranularity_flags = _Enum(CU_MULTICAST_GRANULARITY_RECOMMENDED=1)

    class CUmulticastObjectProp:
        numDevices = size = handleTypes = 0

    def cuMemGetAllocationGranularity(self, prop: object, flags: int) -> tuple[int, int]:
        self.calls.append("cuMemGetAllocationGranularity")
        return self.CUresult.CUDA_SUCCESS, self.alloc_granularity

    def cuMulticastGetGranularity(self, prop: object, flags: int) -> tuple[int, int]:
        self.calls.append("cuMulticastGetGranularity")
        if not self.multicast:
            return self.CUresult.CUDA_ERROR_NOT_SUPPORTED, 0
        return self.CUresult.CUDA_SUCCESS, self.mc_granularity


def _definitions(path: Path, names: set[str]) -> list[ast.stmt]:
    """Module-level defs and assignments of ``names`` in ``path``, in file order."""
    tree = ast.parse(path.read_bytes(), str(path))
    found: list[ast.stmt] = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) and stmt.name in names:
            found.append(stmt)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id in names for t in targets):
                found.append(stmt)
    return found


def _run(statements: list[ast.stmt], filename: str, namespace: dict[str, Any]) -> dict[str, Any]:
    exec(compile(ast.Module(statements, type_ignores=[]), filename, "exec"), namespace)
    return namespace


PROBES = (
    "_check_cuda_device_version",
    "get_device_sm",
    "ceil_div",
    "ceil_align",
    "is_sm90_supported",
    "is_sm100_supported",
    "is_sm120_supported",
    "is_blackwell_supported",
    "is_blackwell",
)


def release_utils(package: Path, torch: Any) -> dict[str, Any]:
    """sglang's own SM probes and ``ceil_align`` from ``srt/utils/common.py``, asking
    ``torch`` (``FakeTorch``, or the real one on a GPU host) for the capability."""
    namespace: dict[str, Any] = {
        "torch": torch,
        "lru_cache": lru_cache,
        "partial": partial,
        "List": list,
        "Tuple": tuple,
        "is_cuda": lambda: True,
        "is_musa": lambda: False,
        "_get_device_sm_via_nvml": lambda: None,
    }
    path = package / "srt/utils/common.py"
    return _run(_definitions(path, set(PROBES)), str(path), namespace)


def release_platform(package: Path) -> Callable[[], Any] | None:
    """sglang's own ``get_platform()`` (0.5.19+); None for releases without it."""
    path = package / "srt/runtime_context.py"
    if not path.is_file():
        return None
    wanted = {"_PLATFORM_PROBES", "_PLATFORM_VALUES", "PlatformContext", "_PLATFORM", "get_platform"}
    statements = _definitions(path, wanted)
    if not any(isinstance(s, ast.ClassDef) for s in statements):
        return None
    return _run(statements, str(path), {"Dict": dict, "Any": Any, "Optional": Optional})["get_platform"]


@contextmanager
def installed_modules(modules: dict[str, types.ModuleType]) -> Iterator[None]:
    """``modules`` importable by name (parents created as needed), sys.modules restored after."""
    names = set(modules)
    for name in list(names):
        parts = name.split(".")
        names |= {".".join(parts[:i]) for i in range(1, len(parts))}
    saved = {name: sys.modules.get(name) for name in names}
    table = {name: modules.get(name) or types.ModuleType(name) for name in names}
    for name in sorted(names, key=lambda n: n.count(".")):
        if "." in name:
            parent, child = name.rsplit(".", 1)
            setattr(table[parent], child, table[name])
    sys.modules.update(table)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


@contextmanager
def utils_importable_as_sglang(utils: dict[str, Any]) -> Iterator[None]:
    """PlatformContext reads each probe through ``from sglang.srt.utils import common``:
    while this is active that import gives the release's probes in ``utils``."""
    common = types.ModuleType("sglang.srt.utils.common")
    common.__dict__.update(utils)
    with installed_modules({"sglang.srt.utils.common": common}):
        yield


def load_function(
    source: bytes, name: str, namespace: dict[str, Any], filename: str = "<sglang>"
) -> Callable[..., Any]:
    """The module-level function ``name`` of ``source``, compiled into ``namespace``."""
    (node,) = [s for s in ast.parse(source).body if isinstance(s, ast.FunctionDef) and s.name == name]
    return _run([node], filename, namespace)[name]


def size_helper(package: Path, source: bytes, utils: dict[str, Any], torch: Any) -> Callable[..., list[int]]:
    """The release's ``_flashinfer_trtllm_workspace_allocation_sizes`` from ``source``, its
    globals being the release's own ``ceil_align`` and SM probes from ``utils``."""
    namespace: dict[str, Any] = {
        "torch": torch,
        "ceil_align": utils["ceil_align"],
        "is_sm120_supported": utils["is_sm120_supported"],
    }
    platform = release_platform(package)
    if platform is not None:
        namespace["get_platform"] = platform
    return load_function(source, "_flashinfer_trtllm_workspace_allocation_sizes", namespace)


def workspace_sizes(
    package: Path,
    source: bytes,
    capability: tuple[int, int],
    driver: FakeCudaDriver,
    world_size: int = 2,
    max_token_num: int = 2048,
    hidden_dim: int = 7168,
) -> list[int]:
    """Run the release's size helper from ``source`` (the file before or after sm120patch)
    on a GPU of ``capability`` behind ``driver``."""
    torch = FakeTorch(capability)
    utils = release_utils(package, torch)
    function = size_helper(package, source, utils, torch)
    prop = types.SimpleNamespace(requestedHandleTypes=1)
    with utils_importable_as_sglang(utils):
        return function(driver, prop, world_size, max_token_num, hidden_dim, torch.bfloat16)


# --- the model auto-enable of fusion (server_args.py up to 0.5.14, overrides.py from 0.5.15) ---

AUTO_ENABLE = "_flashinfer_allreduce_fusion_auto_enable"  # overrides.py, 0.5.15+
ADJUSTMENTS = "_handle_model_specific_adjustments"  # ServerArgs' method, up to 0.5.14
FUSION_FIELDS = ("enable_flashinfer_allreduce_fusion", "flashinfer_allreduce_fusion_backend")


@dataclass
class FakeServerArgs:
    """``ServerArgs`` (up to 0.5.14) or the resolved view of it (0.5.15+) as the auto-enable
    reads them: one node, TP ``tp_size``, a model sglang lists, nothing asked of fusion."""

    tp_size: int
    architecture: str = "Qwen3MoeForCausalLM"
    nnodes: int = 1
    enable_dp_attention: bool = False
    moe_a2a_backend: str = "none"
    disable_custom_all_reduce: bool = False
    enable_flashinfer_allreduce_fusion: bool = False
    flashinfer_allreduce_fusion_backend: str | None = None

    def get_model_config(self) -> Any:
        hf_config = types.SimpleNamespace(architectures=[self.architecture], model_type="qwen3_moe", hidden_size=4096)
        return types.SimpleNamespace(hf_config=hf_config, dtype=FakeTorch.bfloat16)


def fake_device_name(capability: tuple[int, int]) -> str:
    """What ``get_device_name()`` answers for a GPU of ``capability`` (never an H20, which
    0.5.9's auto-enable leaves out)."""
    return {9: "NVIDIA H100 80GB HBM3", 10: "NVIDIA B200", 12: "NVIDIA RTX PRO 6000 Blackwell Server Edition"}[
        capability[0]
    ]


def _loads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _binds(stmt: ast.stmt) -> set[str]:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
    return {t.id for t in targets if isinstance(t, ast.Name)}


def _sets_fusion(stmt: ast.If) -> bool:
    return any(
        isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and n.attr in FUSION_FIELDS
        for s in stmt.body
        for n in ast.walk(s)
    )


def _auto_enable_block(method: ast.FunctionDef) -> ast.FunctionDef:
    """The auto-enable ``if`` of ``ServerArgs._handle_model_specific_adjustments`` (the one
    whose test asks an SM probe and whose body turns fusion on), with the statements before
    it that bind what it reads (``model_arch``, 0.5.9's ``is_h20_device``), as a function of ``self``."""
    body = method.body
    (index,) = [
        i
        for i, s in enumerate(body)
        if isinstance(s, ast.If) and _sets_fusion(s) and any("_supported" in name for name in _loads(s.test))
    ]
    needed, kept = _loads(body[index]), [body[index]]
    for stmt in reversed(body[:index]):
        if _binds(stmt) & needed:
            kept.insert(0, stmt)
            needed |= _loads(stmt)
    return ast.FunctionDef(
        name="auto_enable",
        args=method.args,
        body=kept,
        decorator_list=[],
        lineno=method.lineno,
        end_lineno=method.end_lineno,
        col_offset=0,
    )


def auto_enable_turns_fusion_on(package: Path, source: bytes, capability: tuple[int, int], tp_size: int) -> bool:
    """Run the release's own auto-enable from ``source`` (server_args.py or overrides.py, before
    or after sm120patch) for a model sglang lists, on a GPU of ``capability`` at ``tp_size``;
    whether it turned fusion on."""
    torch = FakeTorch(capability)
    utils = release_utils(package, torch)
    namespace: dict[str, Any] = {
        **{name: utils[name] for name in PROBES if name in utils},
        "logger": types.SimpleNamespace(info=lambda *a, **k: None, warning=lambda *a, **k: None),
        "get_device_name": lambda device_id=0: fake_device_name(capability),
        "model_config_of": lambda view: view.get_model_config(),  # 0.5.23: the view's ModelConfig
        "attn_dp_enabled_of": lambda view: view.enable_dp_attention,  # 0.5.23: DP attention asked
        "Any": Any,
    }
    platform = release_platform(package)
    if platform is not None:
        namespace["get_platform"] = platform
    module = ast.parse(source)
    functions = [s for s in module.body if isinstance(s, ast.FunctionDef) and s.name == AUTO_ENABLE]
    if functions:
        (function,) = functions
        function.decorator_list = []  # ``@register_post_process`` registers the pass; it is called here
        wanted = _loads(function) - namespace.keys()
        constants = [s for s in module.body if _binds(s) & wanted]  # the model list
        _run([*constants, function], "<sglang auto-enable>", namespace)
    else:
        (cls,) = [s for s in module.body if isinstance(s, ast.ClassDef) and s.name == "ServerArgs"]
        (method,) = [s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == ADJUSTMENTS]
        _run([ast.fix_missing_locations(_auto_enable_block(method))], "<sglang auto-enable>", namespace)
    args = FakeServerArgs(tp_size)
    with utils_importable_as_sglang(utils):
        returned = namespace[AUTO_ENABLE if functions else "auto_enable"](args)
    if functions:
        return returned.get(FUSION_FIELDS[1]) is not None
    return args.enable_flashinfer_allreduce_fusion or args.flashinfer_allreduce_fusion_backend is not None
