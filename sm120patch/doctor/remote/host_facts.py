"""Host facts that decide whether the fused allreduce can run, read in the serving interpreter.

``sm120patch doctor`` runs this file with the interpreter that serves sglang and reads the
JSON it prints.  It only asks: torch for the GPUs (with their UUIDs) and peer access, the
CUDA driver bindings for device attributes, its own environment for what decides what CUDA
shows (``CUDA_VISIBLE_DEVICES``) and how torch allocates, and torch's c10 libraries for
which spellings of the allocator variable this torch reads.  It allocates nothing and
creates no multicast object.  Any Python >= 3.8; torch and cuda-bindings are optional
(their absence is an answer).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import traceback
from typing import Any

#: The environment variables that decide what the CUDA runtime shows and how torch allocates.
ENVIRON = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
#: The spellings of the allocator variable torch has read (the newer one from 2.9).
ALLOC_CONF_NAMES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
#: Where torch's C++ reads them (c10/cuda/CUDAAllocatorConfig, c10/core/AllocatorConfig):
#: the names are string literals in these libraries, under ``torch/lib``.
C10_LIBRARIES = ("libc10_cuda.so", "libc10.so", "c10_cuda.dll", "c10.dll", "libc10.dylib")


def _last_line(exc: BaseException) -> str:
    return traceback.format_exception_only(type(exc), exc)[-1].strip()


def _driver() -> tuple[Any, str]:
    try:
        from cuda.bindings import driver

        return driver, "cuda.bindings.driver"
    except ImportError:
        from cuda import cuda as driver  # cuda-python < 12.6

        return driver, "cuda.cuda"


def _attribute(driver: Any, device: Any, name: str) -> int:
    attr = getattr(driver.CUdevice_attribute, name)
    err, value = driver.cuDeviceGetAttribute(attr, device)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError("cuDeviceGetAttribute(%s) failed: %s" % (name, err))
    return int(value)


def allocator_names(torch_dir: str) -> dict[str, Any]:
    """Which spellings of the allocator variable this torch reads: the names as string
    literals (NUL-terminated) in its c10 libraries.  Reads at most two files; ``reads`` is
    None when there is none to read."""
    files = [os.path.join(torch_dir, "lib", name) for name in C10_LIBRARIES]
    files = [f for f in files if os.path.isfile(f)][:2]
    if not files:
        return {"reads": None, "evidence": "no c10 library under %s" % os.path.join(torch_dir, "lib")}
    reads = set()
    for path in files:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            return {"reads": None, "evidence": "%s: %s" % (path, exc.strerror or exc)}
        for name in ALLOC_CONF_NAMES:
            if re.search(b"(?<![A-Z_])" + name.encode() + b"\\x00", data):
                reads.add(name)
    return {"reads": [n for n in ALLOC_CONF_NAMES if n in reads], "evidence": ", ".join(files)}


def nvlink(count: int) -> Any:
    """NVLink between each pair of the first ``count`` GPUs, asked of NVML as sglang asks it
    (``is_full_nvlink``: ``nvmlDeviceGetP2PStatus`` with the NVLink capability); None when
    NVML does not answer.  NVML numbers GPUs as the driver does, so this holds when
    CUDA_VISIBLE_DEVICES is unset (the host says which it is)."""
    try:
        import pynvml
    except Exception:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        pairs = []
        for i in range(count):
            for j in range(count):
                if i != j:
                    status = pynvml.nvmlDeviceGetP2PStatus(handles[i], handles[j], pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
                    pairs.append([i, j, status == pynvml.NVML_P2P_STATUS_OK])
        return pairs
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def read() -> dict[str, Any]:
    result: dict[str, Any] = {
        "python": sys.executable,
        "environ": {name: os.environ[name] for name in ENVIRON if name in os.environ},
        "torch": None,
        "gpus": [],
        "p2p": [],
        "driver": None,
        "devices": [],
    }
    try:
        import torch
    except Exception as exc:  # torch is optional here: its absence is reported, not fatal
        result["torch"] = {"ok": False, "error": _last_line(exc)}
        return result
    result["torch"] = {
        "ok": True,
        "version": str(getattr(torch, "__version__", None)),
        "cuda": getattr(getattr(torch, "version", None), "cuda", None),
    }
    torch_dir = os.path.dirname(os.path.abspath(getattr(torch, "__file__", None) or "."))
    result["torch"]["path"] = torch_dir
    result["torch"]["alloc_conf"] = allocator_names(torch_dir)
    try:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        for i in range(count):
            major, minor = torch.cuda.get_device_capability(i)
            gpu = {"index": i, "name": torch.cuda.get_device_name(i), "capability": [major, minor], "uuid": None}
            result["gpus"].append(gpu)
            try:
                uuid = getattr(torch.cuda.get_device_properties(i), "uuid", None)
                gpu["uuid"] = None if uuid is None else str(uuid)
            except Exception:  # the UUID only ties GPUs to nvidia-smi's; without it they are still listed
                pass
        for i in range(count):
            for j in range(count):
                if i != j:
                    result["p2p"].append([i, j, bool(torch.cuda.can_device_access_peer(i, j))])
        if count > 1 and "CUDA_VISIBLE_DEVICES" not in os.environ:
            result["nvlink"] = nvlink(count)
    except Exception as exc:
        result["torch"]["error"] = _last_line(exc)
    try:
        driver, name = _driver()
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError("cuInit failed: %s" % err)
        err, count = driver.cuDeviceGetCount()
        result["driver"] = {"ok": True, "module": name}
        for i in range(count):
            err, device = driver.cuDeviceGet(i)
            result["devices"].append(
                {
                    "index": i,
                    "multicast": _attribute(driver, device, "CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED"),
                    "gdr_vmm": _attribute(
                        driver, device, "CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED"
                    ),
                }
            )
    except Exception as exc:
        result["driver"] = {"ok": False, "error": _last_line(exc)}
    return result


if __name__ == "__main__":
    sys.stdout.write(json.dumps(read()))
