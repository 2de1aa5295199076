"""sglang's real ``flashinfer_comm_fusion.py`` run in the CPU build of torch, with fakes of
only what needs a GPU or another sglang subsystem, each named:

* ``FakeCudaDriver`` (``cuda.bindings.driver`` as ``get_cuda_driver_bindings`` returns it):
  allocation granularity, multicast granularity (CUDA_ERROR_NOT_SUPPORTED without
  multicast, as on a PCIe RTX PRO 6000 box), ``cuMemCreate`` / ``cuMemRelease``;
* ``FakeCudaDevice``: ``torch.cuda.current_device`` and ``torch.cuda.is_current_stream_capturing``
  of the CPU build (the test says when a graph is being "captured");
* ``FakeFlashInferComm`` (``flashinfer.comm``): the workspace (made, or failing as a
  FlashInfer without a kernel for the GPU fails) and the fused kernel's launch (does nothing);
* ``FakeParallelState`` (``sglang.srt.distributed``): a TP group of 2 whose collectives run
  over a real one-process gloo group;
* ``FakeSglangUtils`` (``sglang.srt.utils``, ``.custom_op``, ``.environ``): FlashInfer is
  installed, ``register_custom_op`` registers nothing, ``ceil_align`` is the release's own.

The real module is found by name under a ``sglang.srt.layers`` package whose path is the
release's own ``layers`` directory, so the hook (probes/server_hook.py as sitecustomize)
wraps it as it wraps it in a server.
"""

from __future__ import annotations

import ast
import json
import os
import socket
import subprocess
import textwrap
from pathlib import Path

from sm120patch.bench.remote import server_hook

FAKE_DRIVER = '''\
"""FakeCudaDriver: cuda.bindings.driver on one GPU, for sm120patch's tests."""
import os
import types


class _Enum:
    def __init__(self, **members):
        self.__dict__.update(members)


CUresult = _Enum(CUDA_SUCCESS=0, CUDA_ERROR_NOT_SUPPORTED=801)
CUmemAllocationHandleType = _Enum(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR=1, CU_MEM_HANDLE_TYPE_FABRIC=8)
CUmemAllocationType = _Enum(CU_MEM_ALLOCATION_TYPE_PINNED=1)
CUmemLocationType = _Enum(CU_MEM_LOCATION_TYPE_DEVICE=1)
CUmemAllocationGranularity_flags = _Enum(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED=1)
CUmulticastGranularity_flags = _Enum(CU_MULTICAST_GRANULARITY_RECOMMENDED=1)
MULTICAST = os.environ.get("FAKE_MULTICAST") == "1"


class CUmemLocation:
    type = id = 0


class CUmemAllocationProp:
    def __init__(self):
        self.requestedHandleTypes = self.type = 0
        self.location = None
        self.allocFlags = types.SimpleNamespace(gpuDirectRDMACapable=0)


class CUmulticastObjectProp:
    numDevices = size = handleTypes = 0


def cuMemGetAllocationGranularity(prop, flags):
    return CUresult.CUDA_SUCCESS, 2 << 20


def cuMulticastGetGranularity(prop, flags):
    if not MULTICAST:
        return CUresult.CUDA_ERROR_NOT_SUPPORTED, 0
    return CUresult.CUDA_SUCCESS, 512 << 20


def cuMemCreate(size, prop, flags):
    return CUresult.CUDA_SUCCESS, object()


def cuMemRelease(handle):
    return (CUresult.CUDA_SUCCESS,)
'''

FAKE_COMM = '''\
"""FakeFlashInferComm: flashinfer.comm as sglang calls it; no kernel runs."""
import enum
import os


class AllReduceFusionPattern(enum.IntEnum):
    kAllReduce = 0
    kARResidualRMSNorm = 1


class _Workspace:
    backend = "trtllm"

    def is_buffer_size_sufficient(self, tp_size, num_tokens, hidden_dim, dtype, use_oneshot=None):
        return True

    def destroy(self):
        pass


def create_allreduce_fusion_workspace(backend, world_size, rank, max_token_num, hidden_dim, dtype,
                                      gpus_per_node=None, comm_backend=None, force_oneshot_support=False,
                                      group=None):
    if os.environ.get("FAKE_WORKSPACE_FAILS"):
        raise RuntimeError("No supported CUDA architectures found for major versions [9, 10]")
    return _Workspace()


def allreduce_fusion(input, workspace, pattern, launch_with_pdl=False, trigger_completion_at_end=True,
                     residual_out=None, norm_out=None, residual_in=None, rms_gamma=None, rms_eps=1e-6,
                     use_oneshot=None, fp32_acc=False):
    return None


def trtllm_create_ipc_workspace_for_all_reduce_fusion(rank, world_size, max_token_num, hidden_dim, group=None,
                                                      use_fp32_lamport=False):
    if os.environ.get("FAKE_WORKSPACE_FAILS"):
        raise RuntimeError("No supported CUDA architectures found for major versions [9, 10]")
    return ["handle"], "workspace-pointers"


def trtllm_allreduce_fusion(**kwargs):
    return None


def trtllm_destroy_ipc_workspace_for_all_reduce(handles, group=None):
    pass
'''

FAKE_MNNVL = '''\
"""FakeFlashInferComm's mnnvl: no fabric."""
class CommBackend:
    pass


class TorchDistBackend(CommBackend):
    def __init__(self, group=None):
        self.group = group


def is_mnnvl_fabric_supported(device):
    return False
'''

FAKE_PARALLEL = '''\
"""FakeParallelState: a TP group of 2 whose collectives run over a one-process gloo group."""
import types

import torch.distributed as dist


def _group():
    return types.SimpleNamespace(world_size=2, device_group=dist.group.WORLD, cpu_group=dist.group.WORLD)


def _two():
    return 2


def _zero():
    return 0


def _one():
    return 1


get_tensor_model_parallel_world_size = get_attn_tensor_model_parallel_world_size = _two
get_moe_tensor_parallel_world_size = _two
get_moe_expert_parallel_world_size = _one
get_attn_tensor_model_parallel_rank = get_moe_tensor_parallel_rank = get_moe_expert_parallel_rank = _zero
get_tp_group = get_attn_tp_group = get_moe_tp_group = get_moe_ep_group = _group
'''

FAKE_ENVIRON = '''\
"""FakeSglangUtils' environ: PosixFD handle exchange (no fabric query)."""
import types

envs = types.SimpleNamespace(SGLANG_FLASHINFER_FORCE_POSIX_FD_TRANSPORT=types.SimpleNamespace(get=lambda: True))
'''

FAKE_CUSTOM_OP = '''\
"""FakeSglangUtils' custom_op: registers nothing (the op is called as a Python function)."""


def register_custom_op(*args, **kwargs):
    return lambda function: function
'''

SCRIPT = """\
import json, logging, os, sys
logging.basicConfig(level=logging.INFO, format="%(message)s")
import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[1], rank=0, world_size=1)
capturing = [False]
# FakeCudaDevice: the CUDA parts of torch that the CPU build lacks
torch.cuda.current_device = lambda: 0
torch.cuda.is_current_stream_capturing = lambda: capturing[0]

from sglang.srt.layers import flashinfer_comm_fusion as fusion

x = torch.randn(4, 64, dtype=torch.bfloat16)
residual = torch.randn_like(x)
weight = torch.ones(64, dtype=torch.bfloat16)
results = [fusion.flashinfer_allreduce_residual_rmsnorm(x, residual, weight)[0] is not None]
capturing[0] = True
results.append(fusion.flashinfer_allreduce_residual_rmsnorm(x, residual, weight)[0] is not None)
capturing[0] = False
print(json.dumps(results))
dist.destroy_process_group()
"""


def _ceil_align(package: Path) -> str:
    """The release's own ``ceil_align`` (and ``ceil_div`` where it calls it), as source."""
    source = (package / "srt/utils/common.py").read_text()
    wanted = {"ceil_div", "ceil_align"}
    parts = [
        ast.get_source_segment(source, node) or ""
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and node.name in wanted
    ]
    return "\n\n\n".join(parts) + "\n"


def write_fakes(root: Path, package: Path) -> Path:
    files = {
        "sglang/__init__.py": "",
        "sglang/srt/__init__.py": "",
        "sglang/srt/layers/__init__.py": f"__path__ = [{str(package / 'srt/layers')!r}]\n",
        "sglang/srt/distributed/__init__.py": FAKE_PARALLEL,
        "sglang/srt/environ.py": FAKE_ENVIRON,
        "sglang/srt/utils/__init__.py": (
            '"""FakeSglangUtils: FlashInfer installed, FakeCudaDriver, the release\'s ceil_align."""\n'
            + _ceil_align(package)
            + "\n\ndef is_flashinfer_available():\n    return True\n\n\n"
            "def get_cuda_driver_bindings():\n    import fake_cuda_driver\n\n    return fake_cuda_driver\n"
        ),
        "sglang/srt/utils/custom_op.py": FAKE_CUSTOM_OP,
        "fake_cuda_driver.py": FAKE_DRIVER,
        "flashinfer/__init__.py": '__version__ = "0.6.18"\n',
        "flashinfer/comm/__init__.py": FAKE_COMM,
        "flashinfer/comm/mnnvl.py": FAKE_MNNVL,
        "script.py": SCRIPT,
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_real_fusion(
    python: Path, package: Path, root: Path, multicast: bool = True, workspace_fails: bool = False
) -> tuple[list[bool], list[str], Path]:
    """Run the release's fusion module twice (eager, then "in capture") with the hook as
    sitecustomize; (whether each call returned a result, sglang's log lines, count dir)."""
    fakes = write_fakes(root / "fakes", package)
    hook = root / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(Path(server_hook.__file__).read_text())
    counts = root / "counts"
    counts.mkdir()
    env = dict(
        os.environ,
        PYTHONPATH=f"{hook}{os.pathsep}{fakes}",
        SM120PATCH_COUNT_DIR=str(counts),
        FAKE_MULTICAST="1" if multicast else "0",
    )
    env.pop("FAKE_WORKSPACE_FAILS", None)
    if workspace_fails:
        env["FAKE_WORKSPACE_FAILS"] = "1"
    proc = subprocess.run(
        [str(python), str(fakes / "script.py"), str(free_port())],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    return results, proc.stderr.splitlines(), counts


def check_source_names(package: Path) -> None:
    """The fakes stand for names the release really imports (a renamed import fails here)."""
    tree = ast.parse((package / "srt/layers/flashinfer_comm_fusion.py").read_text())
    imported = {
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    assert ("sglang.srt.utils.custom_op", "register_custom_op") in imported, textwrap.shorten(str(imported), 300)
