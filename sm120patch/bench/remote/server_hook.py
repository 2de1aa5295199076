"""Counts calls into the fused allreduce + residual + RMSNorm from inside sglang's processes.

``sm120patch bench server`` copies this file, unchanged, into a scratch directory as
``sitecustomize.py`` and puts that directory first on ``PYTHONPATH``.  Python imports it at
start-up in every process of the run: the benchmark's main process and each TP rank that
``multiprocessing`` spawns (a fresh interpreter with the same environment).  With
``SM120PATCH_COUNT_DIR`` set it then:

* wraps, the moment each module has been executed (before anyone imports a name from it):
  - ``sglang.srt.layers.flashinfer_comm_fusion.flashinfer_allreduce_residual_rmsnorm``,
    sglang's entry point (a call that returns ``(None, None)`` fell back to the unfused path);
  - ``flashinfer.comm.allreduce_fusion`` (by its ``pattern``) and the legacy
    ``flashinfer.comm.trtllm_allreduce_fusion`` (by its ``pattern_code``): the kernel launch;
* counts each call as ``eager`` or ``capture`` (``torch.cuda.is_current_stream_capturing()``):
  a CUDA graph's replays run no Python, so decode steps replayed from a graph are not counted;
* replaces ``cuMulticastCreate`` of ``cuda.bindings.driver`` / ``cuda.cuda`` with a function
  that raises: no multicast object is created on a shared machine;
* writes ``<SM120PATCH_COUNT_DIR>/<pid>.json`` (atomically, at the first call, then at most
  once a second and at exit);
* with ``SM120PATCH_FUSE_UP_TO=N`` set, sets the fusion gate module's token limit
  (``FUSE_ALLREDUCE_MAX_BATCH_SIZE``) to N the moment that module has been executed, before
  any other module imports the name, and records the value it replaced (``token_limit``): the
  third setting of ``bench server --fuse-up-to`` runs with N, the tree's files untouched;
* wraps ``ModelRunner.forward`` (``sglang.srt.model_executor.model_runner``; every step goes
  through it, graph replays included) and reads the logits it returns
  (``.logits_output.next_token_logits``): how many forwards had a NaN or inf anywhere
  (``logits.nonfinite``; one device sync per forward, the same in every configuration), and
  the first extend's and the first decode's row 0 (its first ``LOGITS_HEAD`` values, its top
  ``TOP_K``, the input ids it answered), which ``bench server`` compares with sglang's default;
* wraps the methods ``GroupCoordinator.all_reduce`` dispatches a plain allreduce to
  (``sglang.srt.distributed.parallel_state``, 0.5.9 - 0.5.23): ``_all_reduce_out_place`` by
  the method it is given (``ca``: custom allreduce, ``pcie_ipc``: sglang's PCIe-IPC, 0.5.21+,
  ``pynccl``, ``qr``, ``pymscclpp``, ``torch_symm_mem``), ``_all_reduce_in_place`` (NCCL:
  PyNccl or torch.distributed) and ``_flashinfer_allreduce`` (FlashInfer's kAllReduce, the
  plain allreduces fusion takes, 0.5.18+), counted as ``allreduce.<method>`` like the fused
  calls (eager or in capture);
* with ``SM120PATCH_NUMPY_SEED=N`` set, seeds numpy's global generator with N the moment numpy
  is imported: bench_one_batch draws its prompts from it (``np.random.randint``) and nothing in
  its ranks seeds it (sglang's ``set_random_seed`` is the scheduler's), so every configuration
  answers the same request;
* then runs the ``sitecustomize`` it shadows, if there is one.

Standard library only, any Python >= 3.8, no import from sm120patch (the import contract in pyproject.toml).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional

COUNT_DIR_ENV = "SM120PATCH_COUNT_DIR"
FUSE_UP_TO_ENV = "SM120PATCH_FUSE_UP_TO"
NUMPY_SEED_ENV = "SM120PATCH_NUMPY_SEED"
NUMPY = "numpy"
LIMIT_NAME = "FUSE_ALLREDUCE_MAX_BATCH_SIZE"
#: The modules that keep the fusion gate and its token limit, from the bench (``sglang.layout``,
#: and where apply found them in this tree); the two of 0.5.4 - 0.5.23 where it sets none.
GATE_MODULES_ENV = "SM120PATCH_GATE_MODULES"
GATE_MODULES = tuple(
    os.environ.get(GATE_MODULES_ENV, "").split(",")
    if os.environ.get(GATE_MODULES_ENV)
    else ("sglang.srt.layers.communicator", "sglang.srt.layers.layer_boundary.residual.add_norm")
)
SGLANG_FUSION = "sglang.srt.layers.flashinfer_comm_fusion"
SGLANG_ENTRY = "flashinfer_allreduce_residual_rmsnorm"
FLASHINFER_COMM = "flashinfer.comm"
#: The keys of the counts file, by (module, function).
WRAPPED = {
    (SGLANG_FUSION, SGLANG_ENTRY): "sglang." + SGLANG_ENTRY,
    (FLASHINFER_COMM, "allreduce_fusion"): "flashinfer.allreduce_fusion",
    (FLASHINFER_COMM, "trtllm_allreduce_fusion"): "flashinfer.trtllm_allreduce_fusion",
}
MULTICAST_MODULES = ("cuda.bindings.driver", "cuda.cuda")
MULTICAST_MESSAGE = "sm120patch bench server: cuMulticastCreate is disabled (no multicast objects on a shared machine)"
FLUSH_EVERY_S = 1.0
MODEL_RUNNER = "sglang.srt.model_executor.model_runner"
PARALLEL_STATE = "sglang.srt.distributed.parallel_state"
#: GroupCoordinator's methods that carry out a plain allreduce, and the key of each (None:
#: the method's ``outplace_all_reduce_method`` argument names it).
ALLREDUCE_METHODS = {
    "_all_reduce_out_place": None,
    "_all_reduce_in_place": "allreduce.nccl",
    "_flashinfer_allreduce": "allreduce.flashinfer",
}
LOGITS_HEAD = 256  # logits kept of the first extend and decode: enough for a cosine, small in the record
TOP_K = 8
IDS_HEAD = 16  # input ids kept beside them: a comparison is only fair for the same inputs

_lock = threading.Lock()
#: Held from snapshot to rename: the flusher thread and a call's flush otherwise race, and an
#: older snapshot renamed last leaves stale counts (a capture call missing from the file).
_write_lock = threading.Lock()
_counts: Dict[str, Dict[str, int]] = {}
_loaded: List[str] = []
_guarded: List[str] = []
_limits: List[Dict[str, Any]] = []
_state: Dict[str, Any] = {"dirty": False, "written": 0.0}
_logits: Dict[str, Any] = {"forwards": 0, "nonfinite": 0, "first": {}}


def _capturing() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_current_stream_capturing())
    except Exception:  # a torch without CUDA, or one half imported
        return False


def _pattern(kwargs: Dict[str, Any], name: str) -> str:
    value = kwargs.get("pattern", kwargs.get("pattern_code"))
    if value is None:
        return name
    raw = getattr(value, "value", value)
    try:
        number = str(int(raw))
    except (TypeError, ValueError):
        number = str(value)
    return "%s[pattern=%s]" % (name, number)


def _count(key: str, phase: str, fell_back: bool = False) -> None:
    with _lock:
        entry = _counts.setdefault(key, {"eager": 0, "capture": 0, "fell_back": 0})
        first = entry["eager"] + entry["capture"] == 0
        entry[phase] += 1
        if fell_back:
            entry["fell_back"] += 1
        _state["dirty"] = True
        due = first or time.monotonic() - _state["written"] >= FLUSH_EVERY_S
    if due:
        flush()


def _counted(function: Callable[..., Any], key: str, module_name: str) -> Callable[..., Any]:
    @functools.wraps(function)
    def counted(*args: Any, **kwargs: Any) -> Any:
        phase = "capture" if _capturing() else "eager"
        name = _pattern(kwargs, key) if module_name == FLASHINFER_COMM else key
        try:
            result = function(*args, **kwargs)
        except BaseException:
            _count(name, phase)
            raise
        fell_back = module_name == SGLANG_FUSION and isinstance(result, tuple) and bool(result) and result[0] is None
        _count(name, phase, fell_back)
        return result

    counted._sm120patch_counted = True  # type: ignore[attr-defined]
    return counted


def _step(args: Any, kwargs: Any) -> Optional[str]:
    """``extend`` or ``decode`` for a forward batch, None for anything else (idle, a draft)."""
    batch = args[1] if len(args) > 1 else kwargs.get("forward_batch")
    mode = getattr(batch, "forward_mode", None)
    for name in ("decode", "extend"):
        check = getattr(mode, "is_" + name, None)
        try:
            if callable(check) and check():
                return name
        except Exception:
            return None
    return None


def _finite(value: float) -> Optional[float]:
    """A value JSON can hold: NaN and inf become null (the count of bad forwards says them)."""
    value = float(value)
    return value if value - value == 0.0 else None


def _first_row(logits: Any, batch: Any) -> Dict[str, Any]:
    row = logits[0].float()
    top = row.topk(min(TOP_K, int(row.shape[0])))
    ids = getattr(batch, "input_ids", None)
    return {
        "shape": [int(n) for n in logits.shape],
        "head": [_finite(v) for v in row[:LOGITS_HEAD].tolist()],
        "top_values": [_finite(v) for v in top.values.tolist()],
        "top_indices": [int(v) for v in top.indices.tolist()],
        "input_ids": [int(v) for v in ids.reshape(-1)[:IDS_HEAD].tolist()] if ids is not None else None,
    }


def _logits_of(result: Any) -> Any:
    output = getattr(result, "logits_output", None)  # ModelRunnerOutput (0.5.x)
    if output is None:
        output = result[0] if isinstance(result, tuple) and result else result  # (logits_output, ...) before
    logits = getattr(output, "next_token_logits", None)
    return logits if hasattr(logits, "shape") and len(getattr(logits, "shape", ())) == 2 else None


def _record(result: Any, args: Any, kwargs: Any) -> None:
    torch = sys.modules.get("torch")
    logits = _logits_of(result)
    if torch is None or logits is None or _capturing() or int(logits.shape[0]) == 0:
        return
    step = _step(args, kwargs)
    bad = bool((~torch.isfinite(logits)).any().item())
    first = None
    if step is not None and step not in _logits["first"]:
        first = _first_row(logits, args[1] if len(args) > 1 else kwargs.get("forward_batch"))
    with _lock:
        _logits["forwards"] += 1
        news = first is not None or (bad and not _logits["nonfinite"])
        _logits["nonfinite"] += bad
        if first is not None:
            _logits["first"][step] = first
        _state["dirty"] = True
    if news:  # written now: a rank stopped at the end of the run still leaves it
        flush()


def _watched_forward(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def forward(*args: Any, **kwargs: Any) -> Any:
        result = function(*args, **kwargs)
        try:
            _record(result, args, kwargs)
        except Exception as exc:  # never break the server; say why the record is missing
            with _lock:
                _logits["error"] = "%s: %s" % (type(exc).__name__, exc)
                _state["dirty"] = True
        return result

    forward._sm120patch_counted = True  # type: ignore[attr-defined]
    return forward


def _allreduce_counted(function: Callable[..., Any], key: Optional[str]) -> Callable[..., Any]:
    @functools.wraps(function)
    def counted(*args: Any, **kwargs: Any) -> Any:
        name = key
        if name is None:
            method = args[2] if len(args) > 2 else kwargs.get("outplace_all_reduce_method")
            name = "allreduce.%s" % method
        _count(name, "capture" if _capturing() else "eager")
        return function(*args, **kwargs)

    counted._sm120patch_counted = True  # type: ignore[attr-defined]
    return counted


def _refuse_multicast(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(MULTICAST_MESSAGE)


def _after_load(module: Any) -> None:
    name = module.__name__
    if name in MULTICAST_MODULES:
        if hasattr(module, "cuMulticastCreate"):
            try:
                module.cuMulticastCreate = _refuse_multicast
                _guarded.append(name)
            except (AttributeError, TypeError):
                pass
        return
    _loaded.append(name)
    if name == NUMPY:
        _seed(module)
    if name in GATE_MODULES:
        _set_limit(module)
    coordinator = getattr(module, "GroupCoordinator", None) if name == PARALLEL_STATE else None
    for method, key in ALLREDUCE_METHODS.items() if coordinator is not None else ():
        function = getattr(coordinator, method, None)
        if callable(function) and not getattr(function, "_sm120patch_counted", False):
            setattr(coordinator, method, _allreduce_counted(function, key))
    runner = getattr(module, "ModelRunner", None) if name == MODEL_RUNNER else None
    forward = getattr(runner, "forward", None)
    if runner is not None and callable(forward) and not getattr(forward, "_sm120patch_counted", False):
        runner.forward = _watched_forward(forward)
    for (module_name, function_name), key in WRAPPED.items():
        function = getattr(module, function_name, None) if module_name == name else None
        if callable(function) and not getattr(function, "_sm120patch_counted", False):
            setattr(module, function_name, _counted(function, key, module_name))
    with _lock:
        _state["dirty"] = True
    flush()


def _seed(numpy: Any) -> None:
    """numpy's global generator seeded with ``SM120PATCH_NUMPY_SEED``, where it is an integer."""
    try:
        seed = int(os.environ.get(NUMPY_SEED_ENV, ""))
        numpy.random.seed(seed)
    except (AttributeError, TypeError, ValueError):
        return
    with _lock:
        _state["numpy_seed"] = seed


def _set_limit(module: Any) -> None:
    """The gate module's token limit set to ``SM120PATCH_FUSE_UP_TO``, where both are integers."""
    try:
        wanted = int(os.environ.get(FUSE_UP_TO_ENV, ""))
    except ValueError:
        return
    was = getattr(module, LIMIT_NAME, None)
    if type(was) is not int:
        return
    setattr(module, LIMIT_NAME, wanted)
    with _lock:
        _limits.append({"module": module.__name__, "was": was, "now": wanted})


class _Loader:
    """The module's own loader, then ``_after_load``."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        _after_load(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Finder:
    """A meta-path finder for the watched modules only: the spec the other finders give,
    with its loader wrapped."""

    watched = frozenset(
        [SGLANG_FUSION, FLASHINFER_COMM, MODEL_RUNNER, PARALLEL_STATE, NUMPY, *MULTICAST_MODULES, *GATE_MODULES]
    )

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.watched:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Loader(spec.loader)  # type: ignore[assignment]
        return spec


def _rank() -> Optional[int]:
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    return None


def flush() -> None:
    """Write this process's counts, atomically (a reader never sees half a file)."""
    directory = os.environ.get(COUNT_DIR_ENV)
    with _write_lock:
        with _lock:
            if not directory or not _state["dirty"]:
                return
            data = {
                "pid": os.getpid(),
                "ppid": os.getppid(),
                "rank": _rank(),
                "argv0": sys.argv[0] if sys.argv else "",
                "counts": {key: dict(value) for key, value in _counts.items()},
                "loaded": list(_loaded),
                "multicast_guarded": list(_guarded),
                "token_limit": list(_limits),
                "logits": json.loads(json.dumps(_logits)),
                "numpy_seed": _state.get("numpy_seed"),
            }
            _state["dirty"] = False
            _state["written"] = time.monotonic()
        path = os.path.join(directory, "%d.json" % os.getpid())
        try:
            with open(path + ".tmp", "w") as handle:
                json.dump(data, handle)
            os.replace(path + ".tmp", path)
        except OSError:
            pass


def _flusher() -> None:
    while True:
        time.sleep(FLUSH_EVERY_S)
        flush()


def install() -> None:
    """Watch the modules from now on (this process and, through PYTHONPATH, its children)."""
    if any(isinstance(finder, _Finder) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder())
    with _lock:
        _state["dirty"] = True
    flush()
    atexit.register(flush)
    threading.Thread(target=_flusher, name="sm120patch-counts", daemon=True).start()


def _run_shadowed_sitecustomize() -> None:
    """The sitecustomize this file stands in front of (a distribution's, a venv's)."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # as site.py does: report it, go on
        sys.stderr.write("Error in sitecustomize (%s); set PYTHONVERBOSE for traceback:\n%r\n" % (spec.origin, exc))


if __name__ == "sitecustomize":
    if os.environ.get(COUNT_DIR_ENV):
        install()
    _run_shadowed_sitecustomize()
