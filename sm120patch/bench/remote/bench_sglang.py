"""What sglang itself runs, driven from a bench rank (loaded by ``bench_rank.py``).

With fusion **off** a server runs, per allreduce + norm site, ``GroupCoordinator.all_reduce``
(sglang's pick: its custom allreduce v1/v2, FlashInfer's PCIe-IPC allreduce, symmetric
memory, PyNccl under CUDA graphs, NCCL) and then ``RMSNorm.forward`` with a residual
(``sgl_kernel.fused_add_rmsnorm`` on CUDA).  With fusion **on** it calls
``flashinfer_allreduce_residual_rmsnorm`` from ``srt/layers/flashinfer_comm_fusion.py``.
``Native`` sets up sglang's own parallel state and calls exactly those, and names the
allreduce sglang picked for each tensor from sglang's own dispatch (the ``outplace_all_reduce``
/ ``inplace_all_reduce`` / ``flashinfer_allreduce`` calls ``GroupCoordinator.all_reduce``
makes, and the communicator objects it holds).

When sglang's modules do not import in this interpreter the rank measures stand-ins instead
(``StandInAllreduce``): FlashInfer's ``vllm_ar`` -- the algorithm of sglang's custom
allreduce v1 -- where sglang would use its custom allreduce (TP 2, or full NVLink, up to
8 MiB; never at TP 4/8 without NVLink, where it returns garbage, flashinfer#4393), NCCL
elsewhere.  The verdict is then marked indicative.

Standard library plus torch, sglang and FlashInfer where present; any Python >= 3.8; no
import from sm120patch.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

#: sglang's custom allreduce takes tensors up to this size (``_MAX_CAR_SIZE``, 8 MiB).
CA_MAX_BYTES = 8 * 1024 * 1024
#: The CTAs FlashInfer's vllm_ar may launch (its documented upper bound).
VLLM_AR_CTAS = 36

#: ``outplace_all_reduce_method`` values of ``GroupCoordinator.all_reduce``, in words.
METHOD_NAMES = {
    "pcie_ipc": "FlashInfer PCIe-IPC allreduce (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE)",
    "qr": "quick allreduce",
    "pymscclpp": "msccl++ allreduce",
    "torch_symm_mem": "torch symmetric-memory allreduce",
    "pynccl": "NCCL (PyNccl, out of place)",
    "inplace": "NCCL (PyNccl under CUDA graphs, torch.distributed eager)",
    "flashinfer": "FlashInfer kAllReduce (sglang routes plain allreduces there with fusion on)",
    "symm_mem_pynccl": "NCCL symmetric memory (--enable-symm-mem)",
}
_DISPATCH = {"outplace_all_reduce": None, "inplace_all_reduce": "inplace", "flashinfer_allreduce": "flashinfer"}


class SglangUnavailable(Exception):
    """sglang's own code cannot run here; the message says which part and why."""


def _call_with(fn: Callable[..., Any], **kwargs: Any) -> Any:
    """Call ``fn`` with the keywords this release's signature has (they change between releases)."""
    accepted = inspect.signature(fn).parameters
    return fn(**{k: v for k, v in kwargs.items() if k in accepted})


class _Warnings(logging.Handler):
    """sglang's own warnings while it sets up: the reasons it gives for a choice."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # a record that cannot format is no reason
            self.lines.append(record.getMessage())


@contextlib.contextmanager
def listening(handler: _Warnings) -> Iterator[None]:
    logger = logging.getLogger("sglang")
    old_level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def about_allreduce(lines: List[str]) -> List[str]:
    words = ("all reduce", "allreduce", "all-reduce", "p2p", "nvlink", "pcie")
    return [line for line in lines if any(w in line.lower() for w in words)]


class Native:
    """sglang's parallel state, allreduce, RMSNorm and fused call, as its server uses them."""

    def __init__(self, torch: Any, version: Optional[str]) -> None:
        self.torch = torch
        self.version = version
        self.warnings = _Warnings()
        try:
            from sglang.srt.distributed import parallel_state as ps
            from sglang.srt.layers import flashinfer_comm_fusion as fusion
            from sglang.srt.layers import layernorm
        except Exception as exc:
            raise SglangUnavailable("sglang's modules do not import here: %s" % _last_line(exc)) from exc
        self.ps, self.fusion, self.layernorm = ps, fusion, layernorm
        self.seen: List[str] = []
        self._record_dispatch()

    # --- setup -----------------------------------------------------------------------------

    def init(self, world: int, rank: int, backend: str, custom_allreduce: bool) -> None:
        """sglang's ``init_distributed_environment`` + ``initialize_model_parallel`` at TP
        ``world`` (MASTER_ADDR/PORT in the environment), its defaults otherwise."""
        ps = self.ps
        with listening(self.warnings):
            ps.set_custom_all_reduce(custom_allreduce)
            _call_with(
                ps.init_distributed_environment,
                world_size=world,
                rank=rank,
                distributed_init_method="env://",
                local_rank=rank,
                backend=backend,
            )
            self._publish_widths(world)
            _call_with(ps.initialize_model_parallel, tensor_model_parallel_size=world)
        self.group = ps.get_tp_group()

    def _publish_widths(self, world: int) -> None:
        """0.5.18+ read the parallel widths from a runtime context that sglang's launcher
        publishes; state them the way its docstring says callers outside the launcher do."""
        try:
            from sglang.srt.runtime_context import get_parallel
        except ImportError:
            return  # older releases take the widths as arguments
        get_parallel().override_permanently(tp_size=world, pp_size=1)

    # --- what sglang picked -----------------------------------------------------------------

    def _record_dispatch(self) -> None:
        """Wrap the module functions ``GroupCoordinator.all_reduce`` dispatches to, so the
        backend sglang picked for a tensor is read from sglang's own choice."""
        ps = self.ps
        for name, fixed in _DISPATCH.items():
            original = getattr(ps, name, None)
            if original is None:
                continue

            def recorder(*args: Any, _original: Any = original, _fixed: Any = fixed, **kwargs: Any) -> Any:
                method = _fixed or kwargs.get("outplace_all_reduce_method") or (args[2] if len(args) > 2 else "?")
                self.seen.append(str(method))
                return _original(*args, **kwargs)

            setattr(ps, name, recorder)

    def allreduce_name(self, tensor: Any) -> Tuple[str, str]:
        """(what sglang ran for ``tensor``, why not its custom allreduce) after a call."""
        ca = getattr(self.group, "ca_comm", None)
        if not self.seen:  # no dispatch function was called: one of all_reduce's early returns
            if self.group.world_size == 1:
                return "none (TP 1: sglang skips the allreduce)", ""
            if tensor.is_cpu:
                return "torch.distributed all_reduce (gloo: a CPU tensor)", ""
        method = self.seen[-1] if self.seen else "symm_mem_pynccl"
        if method == "ca":
            return "sglang custom allreduce (%s)" % type(ca).__name__, ""
        name = METHOD_NAMES.get(method, method)
        return name, self._why_not_ca(ca, tensor)

    def _why_not_ca(self, ca: Any, tensor: Any) -> str:
        said = about_allreduce(self.warnings.lines)
        if ca is None:
            if not self.ps._ENABLE_CUSTOM_ALL_REDUCE:
                return "custom allreduce turned off (--disable-custom-all-reduce)"
            return "sglang did not create its custom allreduce" + (": %s" % said[-1] if said else "")
        if getattr(ca, "disabled", False):
            return "sglang disabled its custom allreduce" + (": %s" % said[-1] if said else "")
        size = tensor.numel() * tensor.element_size()
        limit = getattr(ca, "max_size", None)
        if limit is not None and size > limit:
            return "%d bytes is over custom allreduce's limit of %d" % (size, limit)
        return "custom allreduce declined this tensor (should_custom_ar)"

    # --- the two paths ------------------------------------------------------------------------

    def norm(self, hidden: int, eps: float, gamma: Any) -> Callable[[Any, Any], Tuple[Any, Any]]:
        """sglang's ``RMSNorm`` with this weight: ``(x, residual) -> (normed, residual)``."""
        module = self.layernorm.RMSNorm(hidden, eps=eps).to(device=gamma.device, dtype=gamma.dtype)
        with self.torch.no_grad():
            module.weight.copy_(gamma)
        return module

    def allreduce(self, x: Any) -> Any:
        self.seen.clear()  # what this call dispatched, and nothing before it
        return self.group.all_reduce(x)

    def fused(self, max_token_num: int, keywords: Dict[str, Any]) -> Callable[..., Tuple[Any, Any]]:
        """sglang's ``flashinfer_allreduce_residual_rmsnorm`` as its layernorm calls it."""
        entry = self.fusion.flashinfer_allreduce_residual_rmsnorm

        def call(x: Any, residual: Any, gamma: Any, eps: float) -> Tuple[Any, Any]:
            with listening(self.warnings):
                return entry(
                    input_tensor=x, residual=residual, weight=gamma, eps=eps, max_token_num=max_token_num, **keywords
                )

        return call

    def capture(self) -> Any:
        """sglang's ``graph_capture()``: custom allreduce registers the graph's buffers after
        capture, PyNccl is switched on, as in the server's CUDA-graph runner."""
        return self.ps.graph_capture()

    def declined(self) -> str:
        """Why sglang's fused call returned no result, in its own words."""
        said = [line for line in self.warnings.lines if "flashinfer" in line.lower() or "fusion" in line.lower()]
        return said[-1] if said else "flashinfer_allreduce_residual_rmsnorm returned (None, None)"


class StandInAllreduce:
    """What stands for sglang's allreduce when sglang cannot run here."""

    def __init__(self, torch: Any, dist: Any, rank: int, world: int, full_nvlink: bool) -> None:
        self.torch, self.dist, self.rank, self.world = torch, dist, rank, world
        self.full_nvlink = full_nvlink
        self.handle: Optional[int] = None
        self.note = ""
        if world == 2 or full_nvlink:
            self._open_vllm_ar()
        else:
            self.note = (
                "no custom-allreduce stand-in at TP %d without full NVLink: sglang runs NCCL there too, and "
                "FlashInfer's vllm_ar would return garbage (flashinfer#4393)" % world
            )

    def _open_vllm_ar(self) -> None:
        try:
            from flashinfer.comm import cuda_ipc, vllm_ar

            torch = self.torch
            self.meta = cuda_ipc.create_shared_buffer(vllm_ar.meta_size() + CA_MAX_BYTES)
            self.buffers = cuda_ipc.create_shared_buffer(CA_MAX_BYTES)
            self.rank_data = torch.empty(CA_MAX_BYTES, dtype=torch.uint8, device="cuda")
            self.handle = vllm_ar.init_custom_ar(self.meta, self.rank_data, self.rank, self.full_nvlink)
            vllm_ar.register_buffer(self.handle, self.buffers)
            self.vllm_ar, self.cuda_ipc = vllm_ar, cuda_ipc
        except Exception as exc:  # no vllm_comm module (JIT off), an old FlashInfer: NCCL stands in
            self.handle = None
            self.note = "FlashInfer's vllm_ar did not start (%s): NCCL stands in everywhere" % _last_line(exc)

    def name(self, tensor: Any) -> Tuple[str, str]:
        if self.takes(tensor):
            return "FlashInfer vllm_ar (stand-in for sglang's custom allreduce v1)", ""
        if self.handle is None:
            return "NCCL (torch.distributed)", self.note
        return "NCCL (torch.distributed)", "over custom allreduce's 8 MiB limit"

    def takes(self, tensor: Any) -> bool:
        return self.handle is not None and tensor.numel() * tensor.element_size() <= CA_MAX_BYTES

    def __call__(self, x: Any) -> Any:
        if not self.takes(x):
            self.dist.all_reduce(x)
            return x
        out = self.torch.empty_like(x)
        # The unregistered-buffer mode (sglang's eager mode): the kernel copies the input
        # into the shared buffer first, inside the captured graph too.
        self.vllm_ar.all_reduce(self.handle, x, out, self.buffers[self.rank], CA_MAX_BYTES, VLLM_AR_CTAS)
        return out

    def close(self) -> None:
        if self.handle is None:
            return
        self.torch.cuda.synchronize()
        self.vllm_ar.dispose(self.handle)
        self.cuda_ipc.free_shared_buffer(self.meta)
        self.cuda_ipc.free_shared_buffer(self.buffers)


def full_nvlink(world: int) -> bool:
    """Whether every pair of the first ``world`` GPUs is linked by NVLink, as sglang asks
    NVML (``is_full_nvlink``); False when NVML cannot say."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(world)]
            for i in range(world):
                for j in range(i + 1, world):
                    status = pynvml.nvmlDeviceGetP2PStatus(handles[i], handles[j], pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
                    if status != pynvml.NVML_P2P_STATUS_OK:
                        return False
            return True
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML: assume PCIe, the conservative answer
        return False


def _last_line(exc: BaseException) -> str:
    text = ("%s: %s" % (type(exc).__name__, exc)).strip()
    return text.splitlines()[-1] if text else type(exc).__name__
