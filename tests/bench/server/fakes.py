"""Fakes for the server bench tests, each standing for what lies outside Python.

* ``FakeTorch`` (``fake_server_site``): the GPUs torch reports (names, capabilities, free
  and total memory) and whether a CUDA graph is being captured.  It cannot run a model.
* ``FakeFlashInfer``: ``flashinfer.comm.allreduce_fusion``, a function that does nothing
  (the fused kernel's launch, counted by the hook).
* ``FakeSglang``: a release's server arguments (which fusion options it has), its
  ``flashinfer_comm_fusion.flashinfer_allreduce_residual_rmsnorm`` (calls the fake kernel,
  or logs sglang's fallback line and returns ``(None, None)``), and a ``bench_one_batch``
  that spawns one process per TP rank like the real one, calls the fused entry in graph
  capture and eagerly, runs its ``ModelRunner.forward`` (logits from the input ids drawn with
  numpy's global generator as the real one, then greedy decode), is 10 % faster with fusion and 20 % with
  ``SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1`` alone, and prints the real release's lines
  (``FAKE_SGLANG`` picks the behaviour: normal, fallback, crash-on, hang:<phase>, grandchild,
  extra-result, tp1-no-entry, nan-on, wrong-on, pcie-off); its ``GroupCoordinator.all_reduce``
  dispatches each plain allreduce as the real one does (``PARALLEL_STATE``).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

RTX_PRO_6000 = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
GiB = 1 << 30

SERVER_ARGS = {
    # up to 0.5.12: the opt-in flag only
    "enable": "class ServerArgs:\n    enable_flashinfer_allreduce_fusion: bool = False\n",
    # 0.5.13: the flag and its escape hatch
    "enable+hatch": (
        "class ServerArgs:\n"
        "    enable_flashinfer_allreduce_fusion: bool = False\n"
        "    enforce_disable_flashinfer_allreduce_fusion: bool = False\n"
    ),
    # 0.5.14+: the backend option, the hatch, the deprecated flag off the CLI
    "backend": (
        "class ServerArgs:\n"
        "    enable_flashinfer_allreduce_fusion: A[bool, Arg(no_cli=True)] = False\n"
        "    enforce_disable_flashinfer_allreduce_fusion: A[bool, 'Enforce disable.'] = False\n"
        "    flashinfer_allreduce_fusion_backend: A[Optional[str], Arg(help='x')] = None\n"
    ),
    "none": "class ServerArgs:\n    tp_size: int = 1\n",
}

FUSION = '''\
"""FakeSglang's flashinfer_comm_fusion: the entry point, calling FakeFlashInfer's kernel."""
import logging
import os

import flashinfer.comm as _flashinfer_comm

logger = logging.getLogger(__name__)
_unavailable = os.environ.get("FAKE_SGLANG") == "fallback"


def pre_initialize_workspaces():
    if _unavailable:
        logger.warning(
            "Failed to initialize FlashInfer workspace: CUDA error 1. "
            "Disabling flashinfer allreduce fusion permanently."
        )


def flashinfer_allreduce_residual_rmsnorm(input_tensor, residual, weight, eps=1e-6):
    if _unavailable:
        return None, None
    _flashinfer_comm.allreduce_fusion(input=input_tensor, pattern=1)
    return input_tensor, residual
'''

BENCH = '''\
"""FakeSglang's bench_one_batch: the real print lines, fake timings."""
import argparse
import multiprocessing
import os
import subprocess
import sys
import time

MODE = os.environ.get("FAKE_SGLANG", "normal")
PCIE_IPC_MODULE = "srt/distributed/device_communicators/pcie_ipc_ar.py"


def hang(phase):
    if MODE == "hang:" + phase:
        if os.environ.get("FAKE_SGLANG_PIDS"):
            with open(os.environ["FAKE_SGLANG_PIDS"], "a") as out:
                out.write("%d\\n" % os.getpid())
        time.sleep(600)


def spawn_helpers():
    pids = []
    for session in (False, True):  # one in the group, one that made a session of its own
        helper = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=session
        )
        pids.append(helper.pid)
    with open(os.environ["FAKE_SGLANG_PIDS"], "a") as out:
        out.write("".join("%d\\n" % pid for pid in pids))


def work(args, rank, fusion):
    import torch
    from sglang.srt.layers import flashinfer_comm_fusion as fusion_module

    say = print if rank == 0 else (lambda *a, **k: None)
    print("[TP%d] Init torch distributed begin." % rank, flush=True)
    print("[TP%d] Load weight begin. avail mem=90.00 GB" % rank, flush=True)
    if MODE == "grandchild" and rank == 0:
        spawn_helpers()
        time.sleep(600)
    fusion_module.pre_initialize_workspaces()
    print("[TP%d] Capture cuda graph begin. This can take up to several minutes." % rank, flush=True)
    if MODE == "crash-on" and fusion:
        failed = "Capture cuda graph failed: No supported CUDA architectures found for major versions [9, 10]"
        print("[TP%d] %s" % (rank, failed), flush=True)
        sys.exit(3)
    hang("capture")
    torch.cuda._capturing = True
    for _ in args.batch_size:
        for _ in range(4):  # one call per layer
            if fusion:
                fusion_module.flashinfer_allreduce_residual_rmsnorm("x", "r", "w")
    torch.cuda._capturing = False
    say("max_total_num_tokens=100000", flush=True)
    say("Warmup ...", flush=True)
    if fusion:
        fusion_module.flashinfer_allreduce_residual_rmsnorm("x", "r", "w")
    hang("warm-up")
    say("Benchmark ...", flush=True)
    from sglang.srt.model_executor import model_runner

    import sglang
    from sglang.srt.distributed import parallel_state

    pcie_ipc = os.path.isfile(os.path.join(os.path.dirname(sglang.__file__), PCIE_IPC_MODULE))
    group = parallel_state.GroupCoordinator(args.tp_size, fusion, pcie_ipc)
    for _ in args.batch_size:
        group.all_reduce("x")
    runner = model_runner.ModelRunner(fusion)
    import numpy as np
    # fusion takes the plain allreduces too (kAllReduce), so PCIe-IPC pays only without it
    factor = 0.9 if fusion else 0.8 if os.environ.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE") == "1" else 1.0
    for bs in args.batch_size:
        ids = np.random.randint(0, 10000, (bs, 4)).tolist()  # as the real one draws its prompts
        out = runner.forward(model_runner.batch(ids, False))
        for _ in range(min(5, args.output_len[0] - 1)):
            rows = out.logits_output.next_token_logits.tolist()
            ids = [[max(range(len(row)), key=lambda i: row[i] if row[i] == row[i] else 0)] for row in rows]
            out = runner.forward(model_runner.batch(ids, True))
        il, ol = args.input_len[0], args.output_len[0]
        if bs > 512:
            say(f"skipping ({bs}, {il}, {ol}) due to max batch size limit")
            continue
        prefill = 0.02 * bs
        try:  # a fake with a gate module: fusion costs 20 % at prefill, where the gate lets it through
            from sglang.srt.layers import communicator

            if fusion and communicator.apply_flashinfer_allreduce_fusion(bs * il):
                prefill *= 1.2
        except ImportError:
            pass
        say(f"Prefill. latency: {prefill:6.5f} s, throughput: {il * bs / prefill:9.2f} token/s")
        latency = 0.01 * factor * (1 + bs / 64)
        for i in range(min(5, ol - 1)):
            say(f"Decode {i}. Batch size: {bs}, latency: {latency:6.5f} s, throughput: {bs / latency:9.2f} token/s")
        say(f"Decode.  median latency: {latency:6.5f} s, median throughput: {bs / latency:9.2f} token/s")
        total = prefill + latency * (ol - 1)
        say(f"Total. latency: {total:6.3f} s, throughput: {(il + ol) * bs / total:9.2f} token/s")
        hang("benchmark")
    if MODE == "extra-result":  # a block more than the sweep asked for (another bench_one_batch)
        say("Prefill. latency: 0.02000 s, throughput:   400.00 token/s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-path")
    parser.add_argument("--tokenizer-path")
    parser.add_argument("--load-format")
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--dtype")
    parser.add_argument("--batch-size", type=int, nargs="+")
    parser.add_argument("--input-len", type=int, nargs="+")
    parser.add_argument("--output-len", type=int, nargs="+")
    parser.add_argument("--run-name")
    parser.add_argument("--mem-fraction-static", type=float)
    parser.add_argument("--enable-flashinfer-allreduce-fusion", action="store_true")
    parser.add_argument("--enforce-disable-flashinfer-allreduce-fusion", action="store_true")
    parser.add_argument("--flashinfer-allreduce-fusion-backend")
    args = parser.parse_args()
    with open(os.path.join(args.model_path, "config.json")) as handle:
        handle.read()
    fusion = bool(args.enable_flashinfer_allreduce_fusion or args.flashinfer_allreduce_fusion_backend)
    if os.environ.get("FAKE_SGLANG_AUTO_ENABLE") and not args.enforce_disable_flashinfer_allreduce_fusion:
        fusion = True
    hang("starting (importing sglang)")
    if args.tp_size == 1:
        work(args, 0, fusion and MODE != "tp1-no-entry")  # a release whose TP 1 path skips the entry
        return
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=work, args=(args, rank, fusion)) for rank in range(args.tp_size)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    sys.exit(max(worker.exitcode or 0 for worker in workers))


if __name__ == "__main__":
    main()
'''


#: FakeTorch's tensors: nested lists, with only what the hook does to logits (``isfinite``,
#: ``~``, ``any``, ``item``, a row, ``float``, ``topk``, ``tolist``, ``reshape(-1)``, a slice).
TENSOR = '''\
import math as _math
import types as _types


class Tensor:
    """FakeTorch's tensor: nested lists of numbers or bools; no device, no dtype."""

    def __init__(self, data):
        self.data = data

    @property
    def shape(self):
        shape, data = [], self.data
        while isinstance(data, list):
            shape.append(len(data))
            data = data[0] if data else None
        return tuple(shape)

    def _flat(self):
        out, todo = [], [self.data]
        while todo:
            item = todo.pop(0)
            if isinstance(item, list):
                todo[:0] = item
            else:
                out.append(item)
        return out

    def __getitem__(self, key):
        value = self.data[key]
        return Tensor(value) if isinstance(value, list) else value

    def float(self):
        return self

    def tolist(self):
        return self.data

    def reshape(self, *shape):
        return Tensor(self._flat())

    def topk(self, k):
        order = sorted(range(len(self.data)), key=lambda i: -self.data[i])[:k]
        return _types.SimpleNamespace(values=Tensor([self.data[i] for i in order]), indices=Tensor(order))

    def __invert__(self):
        return Tensor(_map(self.data, lambda v: not v))

    def any(self):
        return Tensor(any(self._flat()))

    def item(self):
        return self.data


def _map(data, function):
    return [_map(d, function) for d in data] if isinstance(data, list) else function(data)


def isfinite(tensor):
    return Tensor(_map(tensor.data, _math.isfinite))
'''

#: FakeSglang's model runner: logits of a 32-token vocabulary from the input ids, a NaN in
#: every fused forward (``FAKE_SGLANG=nan-on``) or another vector (``wrong-on``).
MODEL_RUNNER = '''\
"""FakeSglang's ModelRunner.forward: logits from the input ids, as the real one returns them."""
import math
import os
import types

import torch

MODE = os.environ.get("FAKE_SGLANG", "normal")
VOCAB = 32


class ForwardMode:
    def __init__(self, decode):
        self.decode = decode

    def is_decode(self):
        return self.decode

    def is_extend(self):
        return not self.decode


class ModelRunner:
    def __init__(self, fusion):
        self.fusion = fusion

    def forward(self, forward_batch, skip_attn_backend_init=None):
        rows = []
        for seed in forward_batch.rows:
            rows.append([math.sin(seed + i) for i in range(VOCAB)])
            if self.fusion and MODE == "wrong-on":
                rows[-1] = [math.cos(3 * seed + 7 * i) for i in range(VOCAB)]
            if self.fusion and MODE == "nan-on":
                rows[-1][3] = float("nan")
        logits = torch.Tensor(rows)
        return types.SimpleNamespace(logits_output=types.SimpleNamespace(next_token_logits=logits))


def batch(ids, decode):
    """A forward batch of ``ids`` (one list per request): its input ids and its mode."""
    flat = [i for row in ids for i in row]
    return types.SimpleNamespace(
        input_ids=torch.Tensor(flat), forward_mode=ForwardMode(decode), rows=[sum(row) for row in ids]
    )
'''


#: FakeSglang's parallel state: ``GroupCoordinator.all_reduce`` picking a backend in the real
#: order (FlashInfer's kAllReduce with fusion on, then custom allreduce at TP 2, then PCIe-IPC
#: where asked for and present, else NCCL), each a method the hook wraps.
PARALLEL_STATE = '''\
"""FakeSglang's GroupCoordinator: the real dispatch order, no communication."""
import logging
import os

logger = logging.getLogger(__name__)


class GroupCoordinator:
    def __init__(self, world_size, fusion, pcie_ipc):
        self.world_size = world_size
        self.fusion = fusion
        self.pcie_ipc = pcie_ipc and os.environ.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE") == "1"
        if self.pcie_ipc and os.environ.get("FAKE_SGLANG") == "pcie-off":
            logger.warning(
                "FlashInfer PCIe-IPC workspace (max_numel=786432) failed: peer access unsupported; "
                "reductions stay on NCCL"
            )
            self.pcie_ipc = False

    def all_reduce(self, input_):
        if self.fusion:
            return self._flashinfer_allreduce(input_)
        method = "ca" if self.world_size == 2 and not self.pcie_ipc else "pcie_ipc" if self.pcie_ipc else None
        if method is not None:
            return self._all_reduce_out_place(input_, method)
        self._all_reduce_in_place(input_)
        return input_

    def _flashinfer_allreduce(self, input_):
        return input_

    def _all_reduce_out_place(self, input_, outplace_all_reduce_method):
        return input_

    def _all_reduce_in_place(self, input_):
        return None
'''


def fake_server_site(
    root: Path,
    gpus: int = 2,
    free_gib: float = 90.0,
    total_gib: float = 95.0,
    options: str = "backend",
    version: str = "0.5.14",
    layout: str = "benchmark/one_batch.py",
    gate: str | None = None,
    pcie_ipc: bool = False,
) -> Path:
    """A directory holding FakeTorch, FakeFlashInfer and FakeSglang; returns the sglang
    package directory (for --sglang-path).  ``gate``: FakeSglang's fusion gate module (its
    ``communicator.py``), whose token limit the fake bench then obeys at prefill."""
    files = {
        "torch/__init__.py": textwrap.dedent(
            f'''\
            """FakeTorch: GPUs and their memory, graph capture on or off; not PyTorch."""
            import types
            __version__ = "2.11.0+fake"
            version = types.SimpleNamespace(cuda="13.0")
            _N = {gpus!r}


            class _Cuda:
                _capturing = False

                def is_available(self):
                    return _N > 0

                def device_count(self):
                    return _N

                def get_device_name(self, i=0):
                    return {RTX_PRO_6000!r}

                def get_device_capability(self, i=0):
                    return (12, 0)

                def mem_get_info(self, i=0):
                    return (int({free_gib!r} * {GiB}), int({total_gib!r} * {GiB}))

                def is_current_stream_capturing(self):
                    return self._capturing


            cuda = _Cuda()
            '''
        )
        + TENSOR,
        "flashinfer/__init__.py": '"""FakeFlashInfer."""\n__version__ = "0.6.18"\n',
        "flashinfer/comm/__init__.py": (
            '"""FakeFlashInfer: the fused kernel\'s launch, doing nothing."""\n'
            "def allreduce_fusion(**kwargs):\n    return None\n"
        ),
        "sglang/__init__.py": "",
        "sglang/srt/__init__.py": "",
        "sglang/srt/server_args.py": SERVER_ARGS[options],
        "sglang/srt/layers/__init__.py": "",
        "sglang/srt/layers/flashinfer_comm_fusion.py": FUSION,
        "sglang/srt/model_executor/__init__.py": "",
        "sglang/srt/model_executor/model_runner.py": MODEL_RUNNER,
    }
    files["sglang/srt/distributed/__init__.py"] = ""
    files["sglang/srt/distributed/parallel_state.py"] = PARALLEL_STATE
    if pcie_ipc:
        files["sglang/srt/distributed/device_communicators/__init__.py"] = ""
        files["sglang/srt/distributed/device_communicators/pcie_ipc_ar.py"] = '"""FakeSglang: PCIe-IPC is here."""\n'
    if gate is not None:
        files["sglang/srt/layers/communicator.py"] = gate
    if layout:
        files[f"sglang/{layout}"] = BENCH
        if "/" in layout:
            files["sglang/benchmark/__init__.py"] = ""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    dist = root / f"sglang-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return root / "sglang"
