"""Host facts that decide whether the fused allreduce can run, read in the serving interpreter.

``sm120patch doctor`` runs this file with the interpreter that serves sglang and reads the
JSON it prints.  It only asks: torch for the GPUs and peer access, the CUDA driver
bindings for device attributes.  It allocates nothing and creates no multicast object.
Any Python >= 3.8; torch and cuda-bindings are optional (their absence is an answer).
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any


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


def read() -> dict[str, Any]:
    result: dict[str, Any] = {
        "python": sys.executable,
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
    result["torch"] = {"ok": True, "version": torch.__version__, "cuda": torch.version.cuda}
    try:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        for i in range(count):
            major, minor = torch.cuda.get_device_capability(i)
            result["gpus"].append({"index": i, "name": torch.cuda.get_device_name(i), "capability": [major, minor]})
        for i in range(count):
            for j in range(count):
                if i != j:
                    result["p2p"].append([i, j, bool(torch.cuda.can_device_access_peer(i, j))])
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
