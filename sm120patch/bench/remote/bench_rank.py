"""One rank of ``sm120patch bench kernel``, run in the serving interpreter (or its ``probe``).

``bench_rank.py probe WORLD``
    prints one JSON object: torch, the GPUs torch sees, P2P between the first WORLD of them,
    FlashInfer (version, package dir, whether ``flashinfer.comm`` has the unified fusion
    API) and sgl_kernel.  Allocates nothing on the GPU.
``bench_rank.py run CONFIG_JSON``
    one rank (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` in the
    environment).  It prints JSON lines on stdout, each with ``event``:
    ``phase`` (name, for the watchdog), ``row`` (one token count measured), ``error``
    (kind, message; the host knows the phase) and ``done``.

What a rank measures, per token count, as sglang runs it (CONFIG_JSON names the release
whose call it mirrors):

* **fused**: FlashInfer's trtllm allreduce + residual + RMSNorm
  (``allreduce_fusion(pattern=kARResidualRMSNorm, ...)``) on a workspace made with
  ``backend="trtllm"`` -- never "auto" or "mnnvl", which create multicast objects;
* **unfused**: the allreduce, then sglang's fused add + RMSNorm (sgl_kernel, else
  FlashInfer's, else torch ops: the row names which);
* **allreduce**: the allreduce alone, the floor the unfused path cannot beat.

Each is timed as FlashInfer's and sglang's benchmarks do: eager warm-up, ``calls`` calls
captured in one CUDA graph, ``replays`` timed replays with CUDA events; the median and p90
per call.  The fused result is checked against allreduce + add + RMSNorm computed in fp32.

Never multicast: ``cuMulticastCreate`` is replaced by a function that raises before
FlashInfer is imported, and ``NCCL_NVLS_ENABLE=0`` / ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``
are set before torch starts NCCL.

``device: "cpu-standin"`` in CONFIG_JSON is for sm120patch's own tests on machines without
a GPU: gloo instead of NCCL, wall-clock timing instead of CUDA graphs, and in place of
FlashInfer's kernel ``CpuStandInFusedKernel``, which computes what the kernel computes with
torch ops (``fault: "garbage"`` makes it return zeros, as a kernel built with an empty body
would).  The user never gets this path: the CLI always asks for ``cuda``.

Standard library plus torch (FlashInfer and sgl_kernel where present); any Python >= 3.8;
no import from sm120patch.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
NO_KERNEL_TEXT = "No supported CUDA architectures found"


class BenchError(Exception):
    """Ends the rank with an ``error`` event of ``kind``: environment (exit 2), mismatch or
    failure (exit 1)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def emit(event: str, **fields: Any) -> None:
    fields["event"] = event
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def last_line(exc: BaseException) -> str:
    return traceback.format_exception_only(type(exc), exc)[-1].strip()


# --- never multicast -----------------------------------------------------------------------


def _refuse_multicast(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("sm120patch bench kernel refuses cuMulticastCreate: it never creates a multicast object")


def guard_multicast() -> List[str]:
    """Replace ``cuMulticastCreate`` in every CUDA driver binding that imports; returns the
    bindings guarded.  Must run before FlashInfer is imported (it binds the function)."""
    for name, value in MULTICAST_ENV.items():
        os.environ[name] = value
    guarded = []
    for module_name in ("cuda.bindings.driver", "cuda.cuda"):
        try:
            module = __import__(module_name, fromlist=["cuMulticastCreate"])
        except ImportError:
            continue
        if hasattr(module, "cuMulticastCreate"):
            try:
                setattr(module, "cuMulticastCreate", _refuse_multicast)  # noqa: B010
            except (AttributeError, TypeError):  # a compiled module that refuses the assignment
                raise BenchError(
                    "environment", "cannot guard %s.cuMulticastCreate: refusing to run" % module_name
                ) from None
            guarded.append(module_name)
    return guarded


# --- probe ---------------------------------------------------------------------------------


def probe(world: int) -> Dict[str, Any]:
    result: Dict[str, Any] = {"python": sys.executable, "torch": None, "gpus": [], "p2p": [], "flashinfer": None}
    try:
        import torch
    except Exception as exc:  # torch's absence is the answer, not a crash
        result["torch"] = {"ok": False, "error": last_line(exc)}
        return result
    result["torch"] = {"ok": True, "version": torch.__version__, "cuda": torch.version.cuda}
    try:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        for i in range(count):
            major, minor = torch.cuda.get_device_capability(i)
            result["gpus"].append({"index": i, "name": torch.cuda.get_device_name(i), "capability": [major, minor]})
        for i in range(min(count, world)):
            for j in range(min(count, world)):
                if i != j:
                    result["p2p"].append([i, j, bool(torch.cuda.can_device_access_peer(i, j))])
    except Exception as exc:  # a broken driver is an answer too
        result["torch"]["error"] = last_line(exc)
    result["flashinfer"] = _flashinfer_facts()
    result["sgl_kernel"] = _importable("sgl_kernel")
    result["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    return result


def _flashinfer_facts() -> Dict[str, Any]:
    guard_multicast()
    try:
        import flashinfer
    except Exception as exc:
        return {"ok": False, "error": last_line(exc)}
    facts: Dict[str, Any] = {
        "ok": True,
        "version": getattr(flashinfer, "__version__", None),
        "package_dir": os.path.dirname(os.path.abspath(flashinfer.__file__)),
    }
    try:
        from flashinfer import comm

        facts["unified_api"] = hasattr(comm, "create_allreduce_fusion_workspace") and hasattr(comm, "allreduce_fusion")
    except Exception as exc:
        facts["comm_error"] = last_line(exc)
    return facts


def _importable(name: str) -> Dict[str, Any]:
    try:
        module = __import__(name)
    except Exception as exc:
        return {"ok": False, "error": last_line(exc)}
    return {"ok": True, "version": getattr(module, "__version__", None)}


# --- the three operations ------------------------------------------------------------------


def rmsnorm_fp32(torch: Any, x: Any, gamma: Any, eps: float) -> Any:
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * gamma


def choose_norm(torch: Any, device: str, eps: float) -> Tuple[str, Callable[[Any, Any, Any], None]]:
    """sglang's fused add + RMSNorm, in place (``residual += x; x = rmsnorm(residual)``):
    the first of sgl_kernel, FlashInfer, torch that runs and is right on a small tensor."""
    candidates: List[Tuple[str, Callable[[Any, Any, Any], None]]] = []
    if device == "cuda":
        try:
            from sgl_kernel import fused_add_rmsnorm as sgl_norm

            candidates.append(("sgl_kernel.fused_add_rmsnorm", lambda x, r, w: sgl_norm(x, r, w, eps)))
        except Exception:  # absent or broken: the next candidate is measured, and named
            pass
        try:
            from flashinfer.norm import fused_add_rmsnorm as fi_norm

            candidates.append(("flashinfer.norm.fused_add_rmsnorm", lambda x, r, w: fi_norm(x, r, w, eps)))
        except Exception:
            pass

    def torch_norm(x: Any, residual: Any, weight: Any) -> None:
        residual.add_(x)
        x.copy_(rmsnorm_fp32(torch, residual.float(), weight.float(), eps).to(x.dtype))

    candidates.append(("torch (add + RMSNorm as separate ops)", torch_norm))
    for name, fn in candidates:
        if _norm_works(torch, fn, device, eps):
            return name, fn
    raise BenchError("failure", "no add + RMSNorm implementation ran correctly")


def _norm_works(torch: Any, fn: Callable[[Any, Any, Any], None], device: str, eps: float) -> bool:
    gen = torch.Generator(device="cpu").manual_seed(7)
    x = torch.randn(4, 256, generator=gen).to(device=device, dtype=torch.bfloat16)
    residual = torch.randn(4, 256, generator=gen).to(device=device, dtype=torch.bfloat16)
    weight = torch.ones(256, device=device, dtype=torch.bfloat16)
    expected = rmsnorm_fp32(torch, x.float() + residual.float(), weight.float(), eps)
    try:
        fn(x, residual, weight)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception:  # e.g. FlashInfer's norm JIT needs headers the host lacks
        return False
    return bool((x.float() - expected).abs().max().item() < 0.1)


class CpuStandInFusedKernel:
    """Only for sm120patch's tests without a GPU: what FlashInfer's trtllm kernel computes,
    in torch ops (``garbage``: zeros, like a kernel built with an empty body)."""

    def __init__(self, torch: Any, dist: Any, garbage: bool) -> None:
        self.torch, self.dist, self.garbage = torch, dist, garbage

    def __call__(self, x: Any, residual: Any, gamma: Any, norm_out: Any, residual_out: Any, eps: float) -> None:
        if self.garbage:
            norm_out.zero_()
            residual_out.zero_()
            return
        total = x.float()
        self.dist.all_reduce(total)
        residual_out.copy_((total + residual.float()).to(x.dtype))
        norm_out.copy_(rmsnorm_fp32(self.torch, residual_out.float(), gamma.float(), eps).to(x.dtype))


# --- timing --------------------------------------------------------------------------------


def percentile(values: List[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def time_cuda_graph(
    torch: Any, dist: Any, fn: Callable[[], None], calls: int, replays: int, capture: Callable[[], Any]
) -> List[float]:
    """µs per call for each replay of a CUDA graph holding ``calls`` calls of ``fn``, captured
    inside ``capture()`` (sglang's ``graph_capture``, where its allreduce needs it)."""
    for _ in range(3):  # eager warm-up: JIT, NCCL communicators, lazy workspaces
        fn()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with capture() as context, torch.cuda.graph(graph, stream=getattr(context, "stream", None)):
        for _ in range(calls):
            fn()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    dist.barrier()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    for start, end in zip(starts, ends):
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    del graph
    return [start.elapsed_time(end) * 1000.0 / calls for start, end in zip(starts, ends)]


def time_wall_clock(dist: Any, fn: Callable[[], None], calls: int, replays: int) -> List[float]:
    """The CPU stand-in's timing: µs per call of ``calls`` eager calls, ``replays`` times."""
    fn()
    dist.barrier()
    times = []
    for _ in range(replays):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) * 1e6 / calls)
    return times


# --- one rank ------------------------------------------------------------------------------


def tolerance(dtype_name: str) -> Tuple[float, float]:
    """(atol, rtol) against the fp32 reference: a few units in the last place of the dtype,
    far below what a kernel that computed nothing (or the wrong sum) would be off by."""
    return (2.0**-5, 2.0**-5) if dtype_name == "bf16" else (2.0**-8, 2.0**-8)


def _sibling(name: str) -> Any:
    """A probe beside this one, loaded by path: probes run with a scratch ``sys.path[0]``."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location("sm120patch_probe_" + name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


class Paths(NamedTuple):
    """The three operations as this rank runs them, and what each one is."""

    source: str  # "sglang" or "stand-in"
    allreduce: Callable[[Any], Any]  # x -> the reduced tensor (in place or new)
    norm_factory: Callable[[Any], Callable[[Any, Any], Any]]  # gamma -> (x, residual) -> (normed, residual)
    norm_name: str
    fused: Callable[..., Tuple[Any, Any]]  # (x, residual, gamma, eps) -> outputs, (None, None) if declined
    fused_name: str
    capture: Callable[[], Any]  # the context a CUDA graph is captured in
    name: Callable[[Any], Tuple[str, str]]  # tensor -> (allreduce, why not custom allreduce)
    declined: Callable[[], str]  # why sglang returned no fused result
    close: Callable[[], None]
    notes: List[str]
    #: With fusion on, 0.5.18+ send plain allreduces to FlashInfer's kAllReduce: that call.
    allreduce_on: Optional[Callable[[Any], Any]] = None


def _sglang_paths(
    torch: Any, dist: Any, native: Any, config: Dict[str, Any], rank: int, world: int, dtype: Any, dev: Any
) -> Tuple[Paths, Any]:
    """sglang's own allreduce, norm and fused call.  Where the fused call cannot run outside
    sglang's server (0.5.18+ read a runtime config only the launcher publishes), FlashInfer's
    call is mirrored from sglang's code instead, and the note says so."""
    call = config["call"]
    keywords = {k: call[k] for k in ("use_oneshot", "trigger_completion_at_end", "fp32_acc") if k in call}
    fused = native.fused(int(call["max_token_num"]), keywords)
    fused_name = "sglang's flashinfer_allreduce_residual_rmsnorm (srt/layers/flashinfer_comm_fusion.py)"
    notes: List[str] = []
    workspace = None
    allreduce_on = _sglang_routed_allreduce(native, config)
    hidden = int(config["hidden"])
    try:  # a norm that cannot run here would fail a server here too: say so, never substitute
        norm = native.norm(hidden, float(config["eps"]), torch.ones(hidden, device=dev, dtype=dtype))
        norm(torch.ones(2, hidden, device=dev, dtype=dtype), torch.ones(2, hidden, device=dev, dtype=dtype))
    except Exception as exc:
        raise BenchError(
            "environment",
            "sglang %s's RMSNorm does not run in this interpreter (%s): a server here would fail the same way"
            % (native.version or "", last_line(exc)),
        ) from exc
    trial = torch.zeros(1, hidden, device=dev, dtype=dtype)
    try:
        fused(trial, trial.clone(), torch.ones(int(config["hidden"]), device=dev, dtype=dtype), 1e-6)
    except Exception as exc:  # not a CUDA fault: sglang's entry wants state only its server sets up
        mirror, workspace = _fused(torch, dist, config, rank, world, dtype, dev)
        fused = _allocating(torch, mirror)
        allreduce_on = _routed_allreduce(torch, config, workspace)
        fused_name = "FlashInfer allreduce_fusion, called as sglang calls it (mirrored from its code)"
        notes.append(
            "sglang %s's fused call does not run outside its server (%s): its FlashInfer call is mirrored"
            % (native.version or "", last_line(exc))
        )
    paths = Paths(
        source="sglang",
        allreduce=native.allreduce,
        norm_factory=lambda gamma: native.norm(int(config["hidden"]), float(config["eps"]), gamma),
        norm_name="sglang %s RMSNorm.forward (srt/layers/layernorm.py)" % (native.version or ""),
        fused=fused,
        fused_name=fused_name,
        capture=native.capture,
        name=native.allreduce_name,
        declined=native.declined,
        close=lambda: None,
        notes=notes,
        allreduce_on=allreduce_on,
    )
    return paths, workspace


def _sglang_routed_allreduce(native: Any, config: Dict[str, Any]) -> Optional[Callable[[Any], Any]]:
    """sglang's own ``flashinfer_allreduce`` on its attention-TP workspace (0.5.18+)."""
    routed = getattr(native.fusion, "flashinfer_allreduce", None)
    if routed is None or not config["call"].get("routes_allreduce"):
        return None
    return lambda x: routed(x, use_attn_tp_group=True)


def _routed_allreduce(torch: Any, config: Dict[str, Any], workspace: Any) -> Optional[Callable[[Any], Any]]:
    """FlashInfer's kAllReduce as sglang's ``flashinfer_allreduce`` calls it, on ``workspace``."""
    if workspace is None or not config["call"].get("routes_allreduce"):
        return None
    from flashinfer import comm

    pattern = comm.AllReduceFusionPattern.kAllReduce

    def routed(x: Any) -> Any:
        output = torch.empty_like(x)
        comm.allreduce_fusion(
            input=x,
            workspace=workspace,
            pattern=pattern,
            launch_with_pdl=True,
            output=output,
            fp32_acc=True,
            trigger_completion_at_end=False,
        )
        return output

    return routed


def _unfused_paths(native: Any, config: Dict[str, Any]) -> Paths:
    """sglang's allreduce and norm only (``only_unfused``: a pass in another environment)."""

    def no_fused(*args: Any) -> Tuple[Any, Any]:
        raise AssertionError("only_unfused: the fused path is not measured in this pass")

    return Paths(
        source="sglang",
        allreduce=native.allreduce,
        norm_factory=lambda gamma: native.norm(int(config["hidden"]), float(config["eps"]), gamma),
        norm_name="sglang %s RMSNorm.forward (srt/layers/layernorm.py)" % (native.version or ""),
        fused=no_fused,
        fused_name="",
        capture=native.capture,
        name=native.allreduce_name,
        declined=native.declined,
        close=lambda: None,
        notes=[],
    )


def _allocating(torch: Any, call: Callable[..., None]) -> Callable[..., Tuple[Any, Any]]:
    """The mirrored kernel call with its outputs allocated per call, as sglang allocates them."""

    def fused(x: Any, residual: Any, gamma: Any, eps: float) -> Tuple[Any, Any]:
        norm_out, residual_out = torch.empty_like(x), torch.empty_like(x)
        call(x, residual, gamma, norm_out, residual_out, eps)
        return norm_out, residual_out

    return fused


def _standin_paths(
    torch: Any, dist: Any, sg: Any, config: Dict[str, Any], rank: int, world: int, dtype: Any, dev: Any, why: str
) -> Tuple[Paths, Any]:
    device = config.get("device", "cuda")
    fused_call, workspace = _fused(torch, dist, config, rank, world, dtype, dev)
    eps = float(config["eps"])
    norm_name, norm = choose_norm(torch, dev.type, eps)

    def norm_factory(gamma: Any) -> Callable[[Any, Any], Tuple[Any, Any]]:
        def run_norm(x: Any, residual: Any) -> Tuple[Any, Any]:
            norm(x, residual, gamma)
            return x, residual

        return run_norm

    if device == "cuda":
        allreduce = sg.StandInAllreduce(torch, dist, rank, world, sg.full_nvlink(world))
        name, close = allreduce.name, allreduce.close
    else:

        def allreduce(x: Any) -> Any:
            dist.all_reduce(x)
            return x

        def name(tensor: Any) -> Tuple[str, str]:
            return "torch.distributed all_reduce (%s)" % dist.get_backend(), ""

        close = lambda: None  # noqa: E731

    notes = [why] if why else []
    if device == "cuda" and getattr(allreduce, "note", ""):
        notes.append(allreduce.note)
    paths = Paths(
        source="stand-in",
        allreduce=allreduce,
        norm_factory=norm_factory,
        norm_name=norm_name,
        fused=_allocating(torch, fused_call),
        fused_name="FlashInfer allreduce_fusion, called as sglang calls it (mirrored from its code)",
        capture=contextlib.nullcontext,
        name=name,
        declined=lambda: "",
        close=close,
        notes=notes,
        allreduce_on=_routed_allreduce(torch, config, workspace),
    )
    return paths, workspace


def run(config: Dict[str, Any]) -> None:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    device = config.get("device", "cuda")
    emit("phase", rank=rank, phase="setup")
    guarded = guard_multicast() if device == "cuda" else []
    import torch
    import torch.distributed as dist

    sg = _sibling("bench_sglang")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[config["dtype"]]
    hidden, eps = int(config["hidden"]), float(config["eps"])
    calls, replays = int(config["calls"]), int(config["replays"])
    baseline = config.get("baseline", "auto")
    native, why = None, ""
    if baseline != "stand-in":
        try:
            native = sg.Native(torch, config.get("sglang_version"))
        except sg.SglangUnavailable as exc:
            if baseline == "sglang":
                raise BenchError("environment", str(exc)) from exc
            why = str(exc)
    else:
        why = "--baseline stand-in"

    emit("phase", rank=rank, phase="process-group")
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
    else:
        dev = torch.device("cpu")
    if native is not None:
        try:
            native.init(world, rank, backend, bool(config.get("custom_allreduce", True)))
        except Exception as exc:  # a release whose parallel state wants what only its server sets up
            if baseline == "sglang":
                message = "sglang's parallel state cannot be set up here: %s" % last_line(exc)
                raise BenchError("environment", message) from exc
            why = "sglang %s's parallel state cannot be set up outside its server (%s)" % (
                native.version or "",
                last_line(exc),
            )
            native = None
    if native is not None or dist.is_initialized():  # sglang's, or as far as sglang got: used as it is
        pass
    elif device == "cuda":
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    warm = torch.ones(1, device=dev)
    dist.all_reduce(warm)  # the communicator exists before any graph is captured

    emit("phase", rank=rank, phase="workspace")
    only_unfused = bool(config.get("only_unfused"))
    if native is not None and only_unfused:  # a second pass in another environment: no fused path
        paths, workspace = _unfused_paths(native, config), None
    elif native is not None:
        paths, workspace = _sglang_paths(torch, dist, native, config, rank, world, dtype, dev)
    else:
        paths, workspace = _standin_paths(torch, dist, sg, config, rank, world, dtype, dev, why)
    versions = _versions(torch, device)
    versions["multicast_guarded"] = guarded

    ops = Ops(torch, dist, dev, dtype, world, eps, paths, fused=not only_unfused)
    for index, tokens in enumerate(config["tokens"]):
        emit("phase", rank=rank, phase="tokens %d" % tokens, index=index, total=len(config["tokens"]))
        row = ops.measure(rank, tokens, hidden, config["dtype"], calls, replays)
        emit("row", rank=rank, tokens=tokens, **row)
    paths.close()
    if workspace is not None:
        workspace.destroy()
    dist.barrier()
    dist.destroy_process_group()
    emit(
        "done",
        rank=rank,
        full_nvlink=bool(device == "cuda" and sg.full_nvlink(world)),
        source=paths.source,
        norm=ops.norm_name,
        fused=paths.fused_name,
        notes=paths.notes,
        versions=versions,
    )


class Ops:
    """The three operations on one token count's tensors, checked and timed."""

    def __init__(
        self, torch: Any, dist: Any, dev: Any, dtype: Any, world: int, eps: float, paths: Paths, fused: bool = True
    ) -> None:
        self.torch, self.dist, self.dev, self.dtype, self.world, self.eps = torch, dist, dev, dtype, world, eps
        self.paths = paths
        self.norm_name = paths.norm_name
        self.with_fused = fused  # False: a pass that times only the unfused path and the allreduce

    def inputs(self, rank: int, tokens: int, hidden: int) -> Tuple[Any, Any, Any]:
        """This rank's input, and the residual and RMSNorm weight every rank shares."""
        torch = self.torch
        shared = torch.Generator(device="cpu").manual_seed(1000 + tokens)
        residual = torch.randn(tokens, hidden, generator=shared).to(device=self.dev, dtype=self.dtype)
        gamma = (torch.rand(hidden, generator=shared) + 0.5).to(device=self.dev, dtype=self.dtype)
        mine = torch.Generator(device="cpu").manual_seed(10_000 * (rank + 1) + tokens)
        x = torch.randn(tokens, hidden, generator=mine).to(device=self.dev, dtype=self.dtype)
        return x, residual, gamma

    def reference(self, x: Any, residual: Any, gamma: Any) -> Tuple[Any, Any]:
        """allreduce + add + RMSNorm in fp32: (normed, residual out)."""
        parts = [self.torch.empty(x.shape, device=self.dev, dtype=self.torch.float32) for _ in range(self.world)]
        self.dist.all_gather(parts, x.float())
        ref_residual = self.torch.stack(parts).sum(dim=0) + residual.float()
        return rmsnorm_fp32(self.torch, ref_residual, gamma.float(), self.eps), ref_residual

    def measure(self, rank: int, tokens: int, hidden: int, dtype_name: str, calls: int, replays: int) -> Dict[str, Any]:
        torch, paths = self.torch, self.paths
        x, residual, gamma = self.inputs(rank, tokens, hidden)
        ref_norm, ref_residual = self.reference(x, residual, gamma)
        norm = paths.norm_factory(gamma)
        on_gpu = self.dev.type == "cuda"
        atol, rtol = tolerance(dtype_name)
        ok, errors = True, {}
        if self.with_fused:
            norm_out, residual_out = paths.fused(x, residual, gamma, self.eps)
            if norm_out is None:
                raise BenchError("declined", "sglang did not fuse %d tokens: %s" % (tokens, paths.declined()))
            if on_gpu:
                torch.cuda.synchronize()
            ok = _within(torch, ref_norm, norm_out, atol, rtol) and _within(
                torch, ref_residual, residual_out, atol, rtol
            )
            errors = {"norm": _max_error(ref_norm, norm_out), "residual": _max_error(ref_residual, residual_out)}

        # The unfused path works in place (as sglang's does); on copies, so the fused inputs stay.
        x_work, residual_work, ar_work = x.clone(), residual.clone(), x.clone()

        def fused() -> None:
            paths.fused(x, residual, gamma, self.eps)

        def unfused() -> None:
            norm(paths.allreduce(x_work), residual_work)

        def allreduce() -> None:
            paths.allreduce(ar_work)

        row: Dict[str, Any] = {"ok": ok, "max_abs_error": errors, "tolerance": {"atol": atol, "rtol": rtol}}
        timed: List[Tuple[str, Callable[[], Any]]] = [("fused", fused), ("unfused", unfused), ("allreduce", allreduce)]
        routed = paths.allreduce_on
        if self.with_fused and routed is not None:
            routed_work = x.clone()
            timed.append(("allreduce_on", lambda: routed(routed_work)))
        for name, fn in timed if self.with_fused else timed[1:]:
            if on_gpu:
                times = time_cuda_graph(torch, self.dist, fn, calls, replays, paths.capture)
            else:
                times = time_wall_clock(self.dist, fn, calls, replays)
            row[name] = {"median_us": statistics.median(times), "p90_us": percentile(times, 0.9)}
            if name == "allreduce":
                row["allreduce_name"], row["allreduce_why"] = paths.name(ar_work)
        return row


def _max_error(reference: Any, got: Any) -> float:
    value = float((reference - got.float()).abs().max().item())
    return float("inf") if math.isnan(value) else value  # NaN (garbage) is infinitely wrong


def _within(torch: Any, reference: Any, got: Any, atol: float, rtol: float) -> bool:
    got = got.float()
    return bool(torch.isfinite(got).all().item()) and bool(
        ((reference - got).abs() <= atol + rtol * reference.abs()).all().item()
    )


def _fused(
    torch: Any, dist: Any, config: Dict[str, Any], rank: int, world: int, dtype: Any, dev: Any
) -> Tuple[Callable[..., None], Any]:
    """The fused call as sglang makes it, and its workspace (None for the CPU stand-in)."""
    if config.get("device", "cuda") != "cuda":
        return CpuStandInFusedKernel(torch, dist, config.get("fault") == "garbage"), None
    from flashinfer import comm

    call = config["call"]
    try:
        workspace = comm.create_allreduce_fusion_workspace(
            backend="trtllm",  # never "auto"/"mnnvl": those create multicast objects
            world_size=world,
            rank=rank,
            max_token_num=int(call["max_token_num"]),
            hidden_dim=int(config["hidden"]),
            dtype=dtype,
            gpus_per_node=world,
            group=dist.group.WORLD,
        )
    except Exception as exc:
        if NO_KERNEL_TEXT in str(exc):
            raise BenchError("no-kernel", last_line(exc)) from exc
        raise
    pattern = comm.AllReduceFusionPattern.kARResidualRMSNorm
    kwargs = {
        "launch_with_pdl": bool(call["launch_with_pdl"]),
        "trigger_completion_at_end": bool(call["trigger_completion_at_end"]),
        "fp32_acc": bool(call["fp32_acc"]),
        "use_oneshot": call["use_oneshot"],
    }

    def fused(x: Any, residual: Any, gamma: Any, norm_out: Any, residual_out: Any, eps: float) -> None:
        comm.allreduce_fusion(
            input=x,
            workspace=workspace,
            pattern=pattern,
            residual_in=residual,
            residual_out=residual_out,
            norm_out=norm_out,
            rms_gamma=gamma,
            rms_eps=eps,
            **kwargs,
        )

    return fused, workspace


def _versions(torch: Any, device: str) -> Dict[str, Any]:
    found: Dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    if device == "cuda":
        found["gpu"] = torch.cuda.get_device_name(0)
        found["capability"] = list(torch.cuda.get_device_capability(0))
        try:
            found["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # an old torch without the query
            found["nccl"] = None
        import flashinfer

        found["flashinfer"] = getattr(flashinfer, "__version__", None)
        found["driver"] = _driver_version()
    return found


def _driver_version() -> Optional[str]:
    try:
        from cuda.bindings import driver

        err, version = driver.cuDriverGetVersion()
        return "%d.%d" % (version // 1000, (version % 1000) // 10) if int(err) == 0 else None
    except Exception:  # cuda-bindings absent: the host asks nvidia-smi instead
        return None


def main(argv: List[str]) -> int:
    if len(argv) == 2 and argv[0] == "probe":
        sys.stdout.write(json.dumps(probe(int(argv[1]))))
        return 0
    if len(argv) != 2 or argv[0] != "run":
        sys.stderr.write("usage: bench_rank.py probe WORLD | run CONFIG_JSON\n")
        return 2
    config = json.loads(argv[1])
    rank = int(os.environ.get("RANK", "-1"))
    try:
        run(config)
    except BenchError as exc:
        emit("error", rank=rank, kind=exc.kind, message=str(exc))  # the host knows the phase
        return 2 if exc.kind in ("environment", "no-kernel") else 1
    except Exception as exc:  # the host reports the rank, phase and last line, never a traceback
        traceback.print_exc()
        emit("error", rank=rank, kind="failure", message=last_line(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
