"""On a machine with ONE NVIDIA GPU: what of `sm120patch bench` one GPU can prove.

    python3 scripts/gpu_one_device_check.py     (after scripts/gpu_carry.py's install prefix)

Prints one JSON object:

* ``flashinfer``: ``import flashinfer.comm`` and loading the prebuilt ``trtllm_comm`` module
  (with ``FLASHINFER_DISABLE_JIT=1`` nothing may compile);
* ``multicast_guard``: bench_rank's guard replaces ``cuMulticastCreate`` in the real driver
  bindings, and calling it raises;
* ``rank_on_one_gpu``: bench_rank's own rank code at world size 1 on NCCL -- sglang's
  parallel state, allreduce (named from sglang's dispatch) and ``RMSNorm`` where sglang
  imports, else the stand-ins; sglang's fused entry reached; the CUDA-graph capture inside
  sglang's ``graph_capture()``; the fp32 reference -- with the fused column timed on
  bench_rank's CPU stand-in run on the GPU (one rank cannot run FlashInfer's kernel);
* ``bench_refusals``: ``sm120patch bench --tp 2`` and ``bench`` (no --tp) exit 2 with one
  sentence on this one-GPU machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sm120patch.bench.remote import bench_rank  # noqa: E402


def _last(exc: BaseException) -> str:
    return traceback.format_exception_only(type(exc), exc)[-1].strip()


def flashinfer_module() -> dict[str, Any]:
    try:
        import flashinfer
        from flashinfer.comm import trtllm_ar

        module = trtllm_ar.get_trtllm_comm_module()
        return {"ok": True, "version": flashinfer.__version__, "module": type(module).__name__}
    except Exception as exc:  # reported, the rest still runs
        return {"ok": False, "error": _last(exc)}


def multicast_guard() -> dict[str, Any]:
    guarded = bench_rank.guard_multicast()
    try:
        from cuda.bindings import driver

        driver.cuMulticastCreate(None)
    except RuntimeError as exc:
        return {"guarded": guarded, "raises": str(exc)}
    except Exception as exc:
        return {"guarded": guarded, "unexpected": _last(exc)}
    return {"guarded": guarded, "raises": None}


def rank_on_one_gpu() -> dict[str, Any]:
    """bench_rank's rank code at world size 1: sglang's own parallel state, allreduce and
    RMSNorm where sglang imports (else the stand-ins), its fused entry reached (it declines
    at one rank), and the CUDA-graph timing with sglang's graph_capture()."""
    import torch
    import torch.distributed as dist

    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    sg = bench_rank._sibling("bench_sglang")
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    config: dict[str, Any] = {
        "hidden": 7168,
        "eps": 1e-6,
        "call": dict(
            max_token_num=2048, launch_with_pdl=True, trigger_completion_at_end=False, fp32_acc=True, use_oneshot=True
        ),
    }
    report: dict[str, Any] = {}
    try:
        import sglang

        native = sg.Native(torch, getattr(sglang, "__version__", None))
        native.init(1, 0, "nccl", True)
        paths, workspace = bench_rank._sglang_paths(torch, dist, native, config, 0, 1, torch.bfloat16, dev)
        x = torch.randn(4, 7168, device=dev, dtype=torch.bfloat16)
        out = paths.fused(x, x.clone(), torch.ones(7168, device=dev, dtype=torch.bfloat16), 1e-6)
        report["sglang_fused_entry_at_world_1"] = "declined (None, None)" if out[0] is None else "fused"
        report["sglang_version"] = native.version
    except sg.SglangUnavailable as exc:
        report["sglang"] = str(exc)
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=dev)
        paths, workspace = bench_rank._standin_paths(torch, dist, sg, config, 0, 1, torch.bfloat16, dev, str(exc))
    dist.all_reduce(torch.ones(1, device=dev))
    # One rank cannot run FlashInfer's fused kernel (it takes 2, 4, 8 or 16): the fused column
    # times bench_rank's stand-in on the GPU, named in the output; the rest is the real path.
    standin = bench_rank.CpuStandInFusedKernel(torch, dist, False)
    paths = paths._replace(fused=bench_rank._allocating(torch, standin), fused_name="CpuStandInFusedKernel on GPU")
    ops = bench_rank.Ops(torch, dist, dev, torch.bfloat16, 1, 1e-6, paths)
    rows = {}
    for tokens in (1, 128, 512, 2048):
        try:
            rows[tokens] = ops.measure(0, tokens, 7168, "bf16", 10, 40)
        except Exception as exc:
            rows[tokens] = {"error": _last(exc), "trace": traceback.format_exc()[-1500:]}
    paths.close()
    if workspace is not None:
        workspace.destroy()
    dist.destroy_process_group()
    report.update(source=paths.source, norm=paths.norm_name, notes=paths.notes, rows=rows)
    return report


def bench_refusals() -> list[dict[str, Any]]:
    results = []
    for args in (["--tp", "2"], []):
        proc = subprocess.run(
            [sys.executable, "-m", "sm120patch", "bench", *args, "--json"],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=600,
        )
        results.append(
            {
                "args": args,
                "exit": proc.returncode,
                "stdout": proc.stdout[-600:],
                "traceback": "Traceback" in proc.stderr,
            }
        )
    return results


def main() -> None:
    report: dict[str, Any] = {"flashinfer": flashinfer_module(), "multicast_guard": multicast_guard()}
    try:
        report["rank_on_one_gpu"] = rank_on_one_gpu()
    except Exception as exc:
        report["rank_on_one_gpu"] = {"error": _last(exc), "trace": traceback.format_exc()[-2000:]}
    report["bench_refusals"] = bench_refusals()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
