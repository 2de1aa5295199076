"""What sglang does when FlashInfer cannot build its SM12x allreduce kernel: crash or fall back.

FlashInfer before 0.6.17 raises ``RuntimeError("No supported CUDA architectures found for
major versions [9, 10]")`` from its JIT when the fusion workspace is first created on an SM12x
GPU.  The slow tier establishes, by running each release's own code, whether sglang lets that
error end the server or catches it and runs unfused:

* the release is installed from its real wheel and patched with every sm120patch patch (only
  a patched tree enables the fusion on SM12x; from 0.5.14 the unpatched resolver refuses the
  GPU before FlashInfer is ever asked);
* its ``layers/flashinfer_comm_fusion.py`` is executed whole, as it is, as a module whose
  imports find named fakes of only what lies outside Python (FlashInfer, torch, torch.distributed
  and sglang's parallel groups on two ranks, the CUDA driver, the launch flags); sglang's own SM
  probes, ``ceil_align`` and ``get_platform()`` come from the release (tests/support/sglang_exec.py);
* then what sglang runs at startup and first use, taken out of the release with ``ast``:
  the runner's ``_pre_initialize_flashinfer_allreduce_workspace`` (0.5.11+, before CUDA-graph
  capture; it has no ``try``), then the CUDA-graph runner's own capture ``try`` statement (which
  turns a RuntimeError into "Capture cuda graph failed"), whose ``capture()`` makes the first
  fused call, ``flashinfer_allreduce_residual_rmsnorm``, as the RMSNorm layer does (the layer
  has no ``try`` either: a (None, None) answer makes it run the unfused norm).

The fast tier checks ``sm120patch.sglang.startup_risk.missing_kernel_effect`` on hand-written shapes;
the slow tier checks that its reading of each release agrees with what the execution shows.
"""

from __future__ import annotations

import ast
import contextlib
import logging
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from sm120patch.sglang.releases import ALL_RELEASES
from sm120patch.sglang.startup_risk import Effect, effect_sentence, missing_kernel_effect
from tests.support.cli import apply_all
from tests.support.realtrees import installed_release
from tests.support.sglang_exec import FakeCudaDriver, FakeTorch, installed_modules, release_platform, release_utils

FUSION = "srt/layers/flashinfer_comm_fusion.py"
NO_SM12X = "No supported CUDA architectures found for major versions [9, 10]"

# --- fast tier: hand-written shapes ------------------------------------------------------------

LAZY_LEGACY = b"""
import flashinfer.comm as comm

class FlashInferWorkspaceManager:
    def initialize(self, world_size, rank):
        self.ipc_handles, self.workspace_tensor = comm.trtllm_create_ipc_workspace_for_all_reduce_fusion(
            rank, world_size, 2048, 4096
        )
        self.initialized = True

    def cleanup(self):
        try:
            comm.trtllm_destroy_ipc_workspace_for_all_reduce(self.ipc_handles)
        except Exception as e:
            logger.warning(e)

_workspace_manager = FlashInferWorkspaceManager()

def ensure_workspace_initialized():
    if not _workspace_manager.initialized:
        _workspace_manager.initialize(world_size=2, rank=0)
    return _workspace_manager.initialized

def flashinfer_allreduce_residual_rmsnorm(x):
    if not ensure_workspace_initialized():
        return None, None
    return comm.trtllm_allreduce_fusion(x)
"""

CAUGHT_UNIFIED = b"""
class FlashInferWorkspaceManager:
    def initialize(self, world_size, rank):
        self.cleanup()
        try:
            self.workspace = _flashinfer_comm.create_allreduce_fusion_workspace(backend="trtllm")
        except Exception as e:
            global _flashinfer_allreduce_unavailable
            _flashinfer_allreduce_unavailable = True
            logger.warning(f"Failed to initialize FlashInfer workspace: {e}. Disabling permanently.")
            return
        self.initialized = True

def pre_initialize_workspaces():
    _manager.initialize(2, 0)
"""


def _caught_with(handler: str) -> bytes:
    return CAUGHT_UNIFIED.replace(b"except Exception as e:", handler.encode())


def test_lazy_creation_without_try_crashes() -> None:
    assert missing_kernel_effect(LAZY_LEGACY) is Effect.CRASH


def test_creation_in_try_except_exception_falls_back() -> None:
    assert missing_kernel_effect(CAUGHT_UNIFIED) is Effect.FALLBACK


@pytest.mark.parametrize(
    "handler",
    ["except:", "except BaseException:", "except RuntimeError as e:", "except (ValueError, RuntimeError) as e:"],
)
def test_handlers_that_take_a_runtime_error_fall_back(handler: str) -> None:
    assert missing_kernel_effect(_caught_with(handler)) is Effect.FALLBACK


@pytest.mark.parametrize("handler", ["except ImportError as e:", "except (ImportError, AttributeError) as e:"])
def test_handlers_that_miss_a_runtime_error_crash(handler: str) -> None:
    assert missing_kernel_effect(_caught_with(handler)) is Effect.CRASH


def test_a_handler_that_raises_again_crashes() -> None:
    source = CAUGHT_UNIFIED.replace(b"            return\n", b"            raise\n", 1)
    assert b"raise\n" in source
    assert missing_kernel_effect(source) is Effect.CRASH


def test_creation_through_an_alias_is_followed() -> None:
    module_alias = b"""
if is_flashinfer_available():
    import flashinfer.comm as comm
    _create_allreduce_fusion_workspace = comm.create_allreduce_fusion_workspace

class FlashInferWorkspaceManager:
    def initialize(self):
        try:
            self.workspace = _create_allreduce_fusion_workspace(**create_kw)
        except Exception as e:
            self.workspace = None
"""
    local_alias = b"""
class FlashInferWorkspaceManager:
    def initialize(self):
        create_workspace = _flashinfer_comm.create_allreduce_fusion_workspace
        self.workspace = create_workspace(**kwargs)
"""
    assert missing_kernel_effect(module_alias) is Effect.FALLBACK
    assert missing_kernel_effect(local_alias) is Effect.CRASH


def test_a_try_around_the_caller_counts() -> None:
    source = LAZY_LEGACY.replace(
        b"        _workspace_manager.initialize(world_size=2, rank=0)\n",
        b"        try:\n            _workspace_manager.initialize(world_size=2, rank=0)\n"
        b"        except Exception:\n            return False\n",
    )
    assert b"try:\n            _workspace_manager" in source
    assert missing_kernel_effect(source) is Effect.FALLBACK


def test_else_and_finally_are_not_protected() -> None:
    for clause in (b"else", b"finally"):
        source = (
            b"""
def initialize():
    try:
        prepare()
    except Exception:
        return
    %s:
        comm.create_allreduce_fusion_workspace()
"""
            % clause
        )
        assert missing_kernel_effect(source) is Effect.CRASH, clause


@pytest.mark.parametrize(
    "source",
    [
        b"def flashinfer_allreduce_residual_rmsnorm(x):\n    return comm.allreduce_fusion(x)\n",  # no creation
        b"workspace = comm.create_allreduce_fusion_workspace()\n",  # at import time
        b"def broken(:\n",  # not Python
        # one path catches, the other does not
        CAUGHT_UNIFIED
        + b"\ndef first_use():\n    return comm.trtllm_create_ipc_workspace_for_all_reduce_fusion(0, 2)\n",
        # a caught call and an uncaught call to the same function
        b"""
def initialize():
    comm.create_allreduce_fusion_workspace()

def pre_initialize():
    try:
        initialize()
    except Exception:
        pass

def first_use():
    initialize()
""",
    ],
    ids=["no-creation", "module-level", "syntax-error", "mixed-creations", "mixed-callers"],
)
def test_unknown_shapes_give_none(source: bytes) -> None:
    assert missing_kernel_effect(source) is None


def test_effect_sentences_name_the_release_and_what_it_does() -> None:
    assert effect_sentence("0.5.9", Effect.CRASH) == (
        "sglang 0.5.9 creates FlashInfer's workspace inside CUDA-graph capture with no fallback: "
        "the server would not start ('Capture cuda graph failed')"
    )
    assert effect_sentence("0.5.13", Effect.FALLBACK) == (
        "sglang 0.5.13 catches the failure and runs unfused: the patches would change nothing"
    )
    assert Effect.CRASH.value == "the server does not start" and Effect.FALLBACK.value == "runs unfused"


def test_an_alias_beside_a_direct_call_keeps_the_direct_call() -> None:
    """A module-level alias of the creator is followed, and the creator's own name still counts."""
    source = LAZY_LEGACY.replace(
        b"import flashinfer.comm as comm\n",
        b"import flashinfer.comm as comm\n_create = comm.create_allreduce_fusion_workspace\n",
    )
    assert missing_kernel_effect(source) is Effect.CRASH


def test_both_creators_rebound_under_their_own_names() -> None:
    """``name = comm.name`` for both FlashInfer functions: the names found are the names known."""
    source = LAZY_LEGACY.replace(
        b"import flashinfer.comm as comm\n",
        b"import flashinfer.comm as comm\n"
        b"trtllm_create_ipc_workspace_for_all_reduce_fusion = comm.trtllm_create_ipc_workspace_for_all_reduce_fusion\n"
        b"create_allreduce_fusion_workspace = comm.create_allreduce_fusion_workspace\n",
    )
    assert missing_kernel_effect(source) is Effect.CRASH


def test_a_raise_nested_in_the_handler_counts_and_one_in_a_nested_def_does_not() -> None:
    nested_raise = CAUGHT_UNIFIED.replace(b"            return\n", b"            if rank:\n                raise\n", 1)
    assert missing_kernel_effect(nested_raise) is Effect.CRASH
    raise_in_def = CAUGHT_UNIFIED.replace(
        b"            return\n",
        b"            def later():\n                raise RuntimeError\n            return\n",
        1,
    )
    assert missing_kernel_effect(raise_in_def) is Effect.FALLBACK


def test_a_creation_in_a_decorator_runs_at_import_and_is_not_judged() -> None:
    """A decorator runs where the def stands (module level here): a shape this does not know."""
    source = b"""
import flashinfer.comm as comm

@register(comm.create_allreduce_fusion_workspace())
def entry(x, *, flag, size=4):
    return comm.create_allreduce_fusion_workspace(x)
"""
    assert missing_kernel_effect(source) is None
    assert missing_kernel_effect(source.replace(b"@register(comm.create_allreduce_fusion_workspace())\n", b"")) is (
        Effect.CRASH
    )


def test_a_decorator_inside_a_function_runs_in_that_function() -> None:
    """A nested def's decorator runs each time its outer function runs: a creation there fails
    where the outer function is called, and a try around the def in that function catches it."""
    source = b"""
import flashinfer.comm as comm

def entry():
    @register(comm.create_allreduce_fusion_workspace())
    def inner():
        pass
"""
    assert missing_kernel_effect(source) is Effect.CRASH
    guarded = source.replace(
        b"    @register(comm.create_allreduce_fusion_workspace())\n    def inner():\n        pass\n",
        b"    try:\n        @register(comm.create_allreduce_fusion_workspace())\n        def inner():\n"
        b"            pass\n    except Exception:\n        pass\n",
    )
    assert missing_kernel_effect(guarded) is Effect.FALLBACK


def test_a_handler_inside_an_outer_try_is_protected_by_the_outer_one() -> None:
    source = b"""
import flashinfer.comm as comm

def entry():
    try:
        try:
            load()
        except ImportError:
            comm.create_allreduce_fusion_workspace()
    except Exception:
        pass
"""
    assert missing_kernel_effect(source) is Effect.FALLBACK
    assert missing_kernel_effect(
        source.replace(b"    except Exception:\n        pass\n", b"    finally:\n        pass\n")
    ) is (Effect.CRASH)


def test_functions_that_only_call_each_other_are_not_judged() -> None:
    """A creation reached only through a cycle (no entry point): unknown, not an endless walk."""
    source = b"""
import flashinfer.comm as comm

def make(n):
    comm.create_allreduce_fusion_workspace()
    again(n)

def again(n):
    make(n - 1)
"""
    assert missing_kernel_effect(source) is None


# --- slow tier: the releases' own code, executed -------------------------------------------------


class FakeFlashInferWithoutSm12x:
    """FlashInfer < 0.6.17 on an SM12x GPU: ``flashinfer.comm`` exports both workspace APIs,
    and creating a workspace (legacy ``trtllm_create_ipc_workspace_for_all_reduce_fusion``,
    unified ``create_allreduce_fusion_workspace``) raises what its JIT raises when it builds
    ``trtllm_comm`` (``supported_major_versions=[9, 10]``); ``flashinfer.comm.mnnvl`` answers
    that this GPU has no MNNVL fabric."""

    def __init__(self) -> None:
        self.raised: list[RuntimeError] = []
        self.fused_calls = 0
        comm = types.ModuleType("flashinfer.comm")
        mnnvl = types.ModuleType("flashinfer.comm.mnnvl")

        def jit_fails(**_: object) -> None:
            self.raised.append(RuntimeError(NO_SM12X))
            raise self.raised[-1]

        def trtllm_create_ipc_workspace_for_all_reduce_fusion(
            tp_rank: int, tp_size: int, max_token_num: int, hidden_dim: int, **kwargs: object
        ) -> None:
            jit_fails()

        def create_allreduce_fusion_workspace(
            backend: str = "auto",
            world_size: int | None = None,
            rank: int | None = None,
            max_token_num: int | None = None,
            hidden_dim: int | None = None,
            dtype: object = None,
            gpus_per_node: int | None = None,
            comm_backend: object = None,
            force_oneshot_support: bool = False,
            use_fp32_lamport: bool = False,
            group: object = None,
        ) -> None:
            jit_fails()

        def fused(**_: object) -> None:  # never reached: no workspace, no fused call
            self.fused_calls += 1

        class TorchDistBackend:
            def __init__(self, group: object = None) -> None:
                self.group = group

        comm.__dict__.update(
            trtllm_create_ipc_workspace_for_all_reduce_fusion=trtllm_create_ipc_workspace_for_all_reduce_fusion,
            create_allreduce_fusion_workspace=create_allreduce_fusion_workspace,
            trtllm_destroy_ipc_workspace_for_all_reduce=lambda *a, **k: None,
            trtllm_allreduce_fusion=fused,
            allreduce_fusion=fused,
            AllReduceFusionPattern=types.SimpleNamespace(kARResidualRMSNorm=1),
            mnnvl=mnnvl,
        )
        mnnvl.__dict__.update(
            is_mnnvl_fabric_supported=lambda device_idx: False,
            TorchDistBackend=TorchDistBackend,
            CommBackend=type("CommBackend", (), {}),
        )
        self.modules = {"flashinfer": types.ModuleType("flashinfer"), "flashinfer.comm": comm}
        self.modules["flashinfer.comm.mnnvl"] = mnnvl


class FakeTensor:
    """A torch tensor as the fusion code looks at it: shape, dtype, contiguity."""

    def __init__(self, shape: tuple[int, ...], dtype: str) -> None:
        self.shape, self.dtype = shape, dtype

    def is_contiguous(self) -> bool:
        return True


class FakeScalar:
    """``torch.tensor([flag], dtype=torch.int32)`` as the TP vote uses it."""

    def __init__(self, data: list[int], dtype: object = None) -> None:
        self.data = data

    def item(self) -> int:
        return self.data[0]


class FakeProcessGroup:
    """A torch.distributed process group of two ranks, seen from rank 0."""

    def rank(self) -> int:
        return 0

    def size(self) -> int:
        return 2


def fake_torch_distributed() -> types.ModuleType:
    """``torch.distributed`` on rank 0 of two, whose peer is in the same state: a collective
    over identical flags (the preflight and failure votes) returns them unchanged."""
    dist = types.ModuleType("torch.distributed")
    dist.__dict__.update(
        ProcessGroup=FakeProcessGroup,
        ReduceOp=types.SimpleNamespace(BAND="band", MAX="max", SUM="sum"),
        group=types.SimpleNamespace(WORLD=FakeProcessGroup()),
        is_initialized=lambda: True,
        get_rank=lambda group=None: 0,
        get_world_size=lambda group=None: 2,
        get_process_group_ranks=lambda group: [0, 1],
        all_reduce=lambda tensor, op=None, group=None: None,
        broadcast_object_list=lambda objects, src=0, group=None: None,
        all_gather_object=lambda out, obj, group=None: out.__setitem__(slice(None), [obj] * len(out)),
        barrier=lambda group=None: None,
    )
    return dist


def fake_torch_on_sm120() -> types.ModuleType:
    """torch on a GPU of compute capability 12.0 with CUDA 12.9 (``FakeTorch``), plus the few
    tensor helpers the fusion code touches, and ``torch.distributed`` as above."""
    base = FakeTorch((12, 0))
    torch = types.ModuleType("torch")
    torch.__dict__.update(
        cuda=base.cuda,
        version=base.version,
        float32=base.float32,
        float16=base.float16,
        bfloat16=base.bfloat16,
        int32="torch.int32",
        dtype=str,
        Tensor=FakeTensor,
        tensor=FakeScalar,
        empty_like=lambda t: FakeTensor(t.shape, t.dtype),
        device=lambda kind, index=None: (kind, index),
        distributed=fake_torch_distributed(),
    )
    return torch


class FakeCudaDriverForPreflight(FakeCudaDriver):
    """``cuda.bindings.driver`` on a PCIe SM12x box (no multicast) that can allocate VMM
    memory: what sglang's workspace preflight (0.5.11+) asks before FlashInfer is called."""

    CUmemAllocationHandleType = types.SimpleNamespace(
        CU_MEM_HANDLE_TYPE_FABRIC=8, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR=1
    )
    CUmemAllocationType = types.SimpleNamespace(CU_MEM_ALLOCATION_TYPE_PINNED=1)
    CUmemLocationType = types.SimpleNamespace(CU_MEM_LOCATION_TYPE_DEVICE=1)

    class CUmemAllocationProp:
        def __init__(self) -> None:
            self.allocFlags = types.SimpleNamespace(gpuDirectRDMACapable=0)

    class CUmemLocation:
        type = id = 0

    def cuMemCreate(self, size: int, prop: object, flags: int) -> tuple[int, int]:
        self.calls.append("cuMemCreate")
        return self.CUresult.CUDA_SUCCESS, len(self.calls)

    def cuMemRelease(self, handle: int) -> tuple[int]:
        self.calls.append("cuMemRelease")
        return (self.CUresult.CUDA_SUCCESS,)


@dataclass
class ParallelState:
    """sglang's parallel groups on two GPUs of one node, seen from rank 0: TP 2 (attention
    and MoE alike), no expert parallelism; every group coordinator is the TP group."""

    device_group: FakeProcessGroup = field(default_factory=FakeProcessGroup)
    cpu_group: FakeProcessGroup = field(default_factory=FakeProcessGroup)

    def coordinator(self) -> types.SimpleNamespace:
        return types.SimpleNamespace(
            world_size=2, rank_in_group=0, device_group=self.device_group, cpu_group=self.cpu_group
        )

    def functions(self) -> dict[str, Any]:
        tp = self.coordinator()
        sizes = {
            "get_tensor_model_parallel_world_size": 2,
            "get_attn_tensor_model_parallel_world_size": 2,
            "get_attn_tensor_model_parallel_rank": 0,
            "get_moe_expert_parallel_world_size": 1,
            "get_moe_expert_parallel_rank": 0,
            "get_moe_tensor_parallel_world_size": 2,
            "get_moe_tensor_parallel_rank": 0,
        }
        functions: dict[str, Any] = {name: (lambda v=v: v) for name, v in sizes.items()}
        for name in ("get_tp_group", "get_attn_tp_group", "get_moe_tp_group", "get_moe_ep_group"):
            functions[name] = lambda: tp
        functions["get_parallel"] = lambda: types.SimpleNamespace(
            tp_size=2,
            attn_tp_size=2,
            attn_tp_rank=0,
            moe_tp_size=2,
            moe_tp_rank=0,
            moe_ep_size=1,
            moe_ep_rank=0,
            nnodes=1,
            tp_group=tp,
            attn_tp_group=tp,
        )
        functions["in_the_same_node_as"] = lambda group, source_rank=0: [True, True]
        functions["is_one_nvlink_clique"] = lambda group=None, device=None: False
        functions["post_experts_reduction_group"] = lambda: tp
        functions["can_merge_post_experts_all_reduce"] = lambda: False
        return functions


# The launch flags: fusion requested (``--enable-flashinfer-allreduce-fusion``; backend
# ``auto`` from 0.5.14), one node.
LAUNCH_FLAGS = types.SimpleNamespace(
    enable_flashinfer_allreduce_fusion=True, flashinfer_allreduce_fusion_backend="auto", nnodes=1
)


def _identity_decorator(*args: object, **kwargs: object) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return lambda function: function


# torch's custom-op registry: an eager call of a registered op runs the Python function itself.
TORCH_CUSTOM_OPS = {
    "register_custom_op": _identity_decorator,
    "supports_custom_op": lambda: False,
    "direct_register_custom_op": lambda *args, **kwargs: None,
}


def _module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    return module


def _read_constant(package: Path, name: str) -> Any:
    """A module-level constant of the release (``FUSE_ALLREDUCE_MAX_BATCH_SIZE``)."""
    for rel in ("srt/layers/communicator.py", "srt/layers/layer_boundary/residual/add_norm.py"):
        path = package / rel
        if path.is_file():
            for stmt in ast.parse(path.read_bytes()).body:
                if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                    return ast.literal_eval(stmt.value)
    raise LookupError(name)


def _method(package: Path, rels: tuple[str, ...], name: str) -> ast.FunctionDef | None:
    """The method ``name`` of any class in the first of ``rels`` that has one."""
    for rel in rels:
        path = package / rel
        if not path.is_file():
            continue
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
    return None


def _capture_try(package: Path) -> tuple[ast.Try, str]:
    """The CUDA-graph runner's ``try: with model_capture_mode(): self.capture() except ...``."""
    for rel in ("srt/model_executor/runner/decode_cuda_graph_runner.py", "srt/model_executor/cuda_graph_runner.py"):
        path = package / rel
        if not path.is_file():
            continue
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, ast.Try) and any(
                isinstance(call, ast.Call) and ast.unparse(call.func) == "self.capture"
                for stmt in node.body
                for call in ast.walk(stmt)
            ):
                return node, str(path)
    raise LookupError("no CUDA-graph capture try statement")


def _compile_function(node: ast.stmt | list[ast.stmt], filename: str, namespace: dict[str, Any]) -> Callable[..., Any]:
    """``node`` (a def) or a statement list (as the body of ``def run(self)``) compiled into
    ``namespace``."""
    if isinstance(node, list):
        wrapper = ast.parse("def run(self):\n    pass\n").body[0]
        assert isinstance(wrapper, ast.FunctionDef)
        wrapper.body = node
        node = wrapper
    assert isinstance(node, ast.FunctionDef)
    node.decorator_list = []
    module = ast.fix_missing_locations(ast.Module(body=[node], type_ignores=[]))
    exec(compile(module, filename, "exec"), namespace)
    return namespace[node.name]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class Outcome:
    effect: Effect
    where: str  # "startup" (before CUDA-graph capture) or "first call" (inside it)
    decided_by: str  # the function that caught the failure, or where it left sglang
    error: BaseException | None
    first_call: object
    unavailable_after: bool | None  # is_flashinfer_allreduce_unavailable() afterwards
    records: list[logging.LogRecord]
    flashinfer: FakeFlashInferWithoutSm12x


def run_release(package: Path, source: bytes) -> Outcome:
    """Execute the release's fusion module ``source`` and the startup and first-use paths
    taken from ``package`` on an SM12x host whose FlashInfer lacks the kernel."""
    torch = fake_torch_on_sm120()
    flashinfer = FakeFlashInferWithoutSm12x()
    driver = FakeCudaDriverForPreflight(multicast=False)
    parallel = ParallelState().functions()
    utils = release_utils(package, torch)
    platform = release_platform(package)
    resources = types.SimpleNamespace(buffers={})  # sglang's per-process registry of workspaces
    runtime = {
        "get_parallel": parallel["get_parallel"],
        "get_server_args": lambda: LAUNCH_FLAGS,
        "get_exec": lambda: types.SimpleNamespace(comm=LAUNCH_FLAGS),
        "get_resources": lambda: resources,
        **({"get_platform": platform} if platform else {}),
    }
    sglang_utils = {
        **utils,
        **TORCH_CUSTOM_OPS,
        "is_flashinfer_available": lambda: True,
        "get_cuda_driver_bindings": lambda: driver,
    }
    fuse_max = _read_constant(package, "FUSE_ALLREDUCE_MAX_BATCH_SIZE")
    environment = types.SimpleNamespace(  # sglang's envs with nothing set in the environment
        SGLANG_FLASHINFER_FORCE_POSIX_FD_TRANSPORT=types.SimpleNamespace(get=lambda: None)
    )
    fakes: dict[str, dict[str, Any]] = {
        "sglang.srt.distributed": parallel,
        "sglang.srt.distributed.parallel_state": parallel,
        "sglang.srt.distributed.device_communicators.custom_all_reduce_utils": parallel,
        "sglang.srt.layers.moe.utils": parallel,
        "sglang.srt.runtime_context": runtime,
        "sglang.srt.server_args": {"get_global_server_args": lambda: LAUNCH_FLAGS},
        "sglang.srt.environ": {"envs": environment},
        "sglang.srt.utils": sglang_utils,
        "sglang.srt.utils.common": sglang_utils,
        "sglang.srt.utils.custom_op": TORCH_CUSTOM_OPS,
        "sglang.srt.layers.communicator": {"FUSE_ALLREDUCE_MAX_BATCH_SIZE": fuse_max},
        "sglang.srt.layers.layer_boundary": {"FUSE_ALLREDUCE_MAX_BATCH_SIZE": fuse_max},
    }
    modules = {name: _module(name, **attributes) for name, attributes in fakes.items()}
    modules.update(flashinfer.modules, torch=torch)
    modules["torch.distributed"] = torch.distributed
    fusion = types.ModuleType("sglang.srt.layers.flashinfer_comm_fusion")
    fusion.__file__ = str(package / FUSION)
    modules[fusion.__name__] = fusion
    records = _Records()
    logger = logging.getLogger(fusion.__name__)
    level = logger.level
    logger.addHandler(records)
    logger.setLevel(logging.DEBUG)
    try:
        with installed_modules(modules):
            exec(compile(source, fusion.__file__, "exec"), fusion.__dict__)
            return _startup_and_first_call(package, fusion, records, flashinfer)
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)


def _startup_and_first_call(
    package: Path, fusion: types.ModuleType, records: _Records, flashinfer: FakeFlashInferWithoutSm12x
) -> Outcome:
    def outcome(effect: Effect, where: str, decided_by: str, error: BaseException | None, first: object) -> Outcome:
        unavailable = getattr(fusion, "is_flashinfer_allreduce_unavailable", None)
        return Outcome(
            effect, where, decided_by, error, first, unavailable() if unavailable else None, records.records, flashinfer
        )

    def decided_by() -> str:
        caught = [r for r in records.records if r.levelno >= logging.WARNING and NO_SM12X in r.getMessage()]
        return caught[0].funcName if caught else "?"

    model_runner = types.SimpleNamespace(
        server_args=LAUNCH_FLAGS,
        model_config=types.SimpleNamespace(hidden_size=7168),
        dtype="torch.bfloat16",
        is_draft_worker=False,
        device="cuda",
    )
    model_runner.model_runner = model_runner  # ModelRunner (0.5.11-0.5.13) or a runner holding one (0.5.14+)
    pre_initialize = _method(
        package,
        ("srt/model_executor/model_runner.py", "srt/model_executor/runner/base_runner.py"),
        "_pre_initialize_flashinfer_allreduce_workspace",
    )
    if pre_initialize is not None:  # startup, before CUDA-graph capture
        namespace = {"get_exec": lambda: types.SimpleNamespace(comm=LAUNCH_FLAGS)}
        try:
            _compile_function(pre_initialize, "<runner>", namespace)(model_runner)
        except Exception as error:
            return outcome(Effect.CRASH, "startup", "propagates out of pre_initialize_workspaces", error, None)

    # First use: the fused call during CUDA-graph capture, in the release's capture try statement.
    first: list[object] = []

    def capture() -> None:  # one decode step: the RMSNorm layer asks for the fused kernel
        x = FakeTensor((8, 7168), "torch.bfloat16")
        residual = FakeTensor((8, 7168), "torch.bfloat16")
        weight = FakeTensor((7168,), "torch.bfloat16")
        first.append(fusion.flashinfer_allreduce_residual_rmsnorm(input_tensor=x, residual=residual, weight=weight))

    try_node, filename = _capture_try(package)
    namespace = {
        "model_capture_mode": contextlib.nullcontext,  # sglang's capture-mode flag; passes errors through
        "CUDA_GRAPH_CAPTURE_FAILED_MSG": "(sglang's advice on capture failures)",
    }
    run_capture = _compile_function([try_node], filename, namespace)
    try:
        run_capture(types.SimpleNamespace(capture=capture))
    except Exception as error:
        return outcome(
            Effect.CRASH, "first call", "propagates out of flashinfer_allreduce_residual_rmsnorm", error, None
        )
    where = "startup" if pre_initialize is not None else "first call"
    return outcome(Effect.FALLBACK, where, decided_by(), None, first[0])


def _chain(error: BaseException | None) -> list[BaseException]:
    chain = []
    while error is not None:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


RELEASES = [v for v in ALL_RELEASES if Version(v) >= Version("0.5.4")]  # every release sm120patch patches
FIRST_FALLBACK = Version("0.5.10")  # the first release whose workspace manager catches the failure
FIRST_PRE_INITIALIZE = Version("0.5.11")  # workspaces created at startup, before CUDA-graph capture


@pytest.mark.slow
@pytest.mark.parametrize("version", RELEASES)
def test_patched_release_crashes_or_falls_back_as_its_structure_says(
    release: Callable[..., Path], version: str
) -> None:
    package = release(version)
    original = (package / FUSION).read_bytes()
    assert apply_all(package).exit_code == 0
    patched = (package / FUSION).read_bytes()

    outcome = run_release(package, patched)

    assert outcome.flashinfer.raised, "FlashInfer's workspace creation was never reached"
    assert outcome.flashinfer.fused_calls == 0
    expected = Effect.FALLBACK if Version(version) >= FIRST_FALLBACK else Effect.CRASH
    assert outcome.effect is expected
    if expected is Effect.CRASH:
        # Lazily, in the first fused call during CUDA-graph capture; nothing in sglang catches it.
        assert outcome.where == "first call"
        assert outcome.flashinfer.raised[-1] in _chain(outcome.error)
        assert str(outcome.error).startswith(f"Capture cuda graph failed: {NO_SM12X}")
    else:
        assert outcome.decided_by == "initialize"  # FlashInferWorkspaceManager.initialize's except Exception
        assert outcome.where == ("startup" if Version(version) >= FIRST_PRE_INITIALIZE else "first call")
        assert outcome.first_call == (None, None)  # the RMSNorm layer then runs the unfused norm
        assert outcome.unavailable_after is True
        assert len(outcome.flashinfer.raised) == 1  # disabled permanently: never tried again
        warnings = [r.getMessage() for r in outcome.records if r.levelno >= logging.WARNING]
        assert any(NO_SM12X in m and "Disabling flashinfer allreduce fusion permanently" in m for m in warnings)
        # Nothing else went wrong on the way (a fake too thin would show up here).
        quiet = [r.getMessage() for r in outcome.records if "preflight probe failed" in r.getMessage()]
        quiet += [r.getMessage() for r in outcome.records if "Failed to sync" in r.getMessage()]
        assert quiet == []

    # The structural reading agrees with the execution, on the release file and the patched one.
    assert missing_kernel_effect(original) is outcome.effect
    assert missing_kernel_effect(patched) is outcome.effect


@pytest.mark.slow
@pytest.mark.parametrize("version", ["0.5.14", "0.5.23"])
def test_unpatched_resolver_fails_before_flashinfer(version: str) -> None:
    """Without sm120patch, 0.5.14+ refuses SM12x in ``_resolve_backend`` at startup, before
    FlashInfer is asked: the same harness sees that crash, and FlashInfer untouched."""
    package = installed_release(version) / "sglang"
    outcome = run_release(package, (package / FUSION).read_bytes())
    assert outcome.effect is Effect.CRASH and outcome.where == "startup"
    assert isinstance(outcome.error, ValueError) and "requires SM90 or SM10X" in str(outcome.error)
    assert outcome.flashinfer.raised == []
