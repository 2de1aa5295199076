"""On a real NVIDIA GPU: run sglang's workspace size helper, before and after sm120patch.

    python3 scripts/gpu_proof.py SGLANG_PACKAGE_DIR   (after `sm120patch apply` on it)

Uses the real torch and the real ``cuda.bindings.driver``; the original file comes from
sm120patch's backup.  Prints one JSON object:

* ``unpatched`` / ``patched``: the release's ``_flashinfer_trtllm_workspace_allocation_sizes``
  on this GPU (world 2, 2048 tokens, hidden 7168, bf16): the sizes, or the error it raised;
  on a non-SM12x GPU both must be the same;
* ``sm12x_branch``: the patched function with the release's own ``is_sm120`` probe answered
  "yes" (nothing else simulated), and whether ``cuMemCreate`` allocates those sizes with the
  allocation properties sglang's preflight uses.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.sglang_exec import (
    load_function,
    release_utils,
    size_helper,
    utils_importable_as_sglang,
)

FUSION = "srt/layers/flashinfer_comm_fusion.py"
PROP = "_make_flashinfer_workspace_allocation_prop"


def _call(package: Path, source: bytes, utils: dict[str, Any], driver: Any, torch: Any) -> dict[str, Any]:
    sizes = size_helper(package, source, utils, torch)
    make_prop = load_function(source, PROP, {"torch": torch})
    with utils_importable_as_sglang(utils):
        try:
            prop = make_prop(driver)
            prop_note = f"{PROP} (real, FlashInfer's fabric check)"
        except Exception as exc:  # flashinfer.comm may not import without its own deps
            prop = _posix_fd_prop(driver, torch)
            prop_note = f"{PROP}'s POSIX-FD branch rebuilt ({exc})"
        try:
            result = sizes(driver, prop, 2, 2048, 7168, torch.bfloat16)
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}", "prop": prop_note}
    return {"sizes": result, "prop": prop_note, "allocates": _allocates(driver, result, prop)}


def _posix_fd_prop(driver: Any, torch: Any) -> Any:
    prop = driver.CUmemAllocationProp()
    prop.requestedHandleTypes = driver.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    prop.type = driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location = driver.CUmemLocation()
    prop.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = torch.cuda.current_device()
    prop.allocFlags.gpuDirectRDMACapable = 1
    return prop


def _allocates(driver: Any, sizes: list[int], prop: Any) -> bool:
    handles = []
    try:
        for size in sizes:
            err, handle = driver.cuMemCreate(size, prop, 0)
            if err != driver.CUresult.CUDA_SUCCESS:
                return False
            handles.append(handle)
        return True
    finally:
        for handle in handles:
            driver.cuMemRelease(handle)


def main(package: Path) -> dict[str, Any]:
    import torch
    from cuda.bindings import driver

    torch.cuda.init()
    (err,) = driver.cuInit(0)
    assert err == driver.CUresult.CUDA_SUCCESS, err
    backup = package / ".sm120patch" / "backups" / FUSION
    original, patched = backup.read_bytes(), (package / FUSION).read_bytes()
    utils = release_utils(package, torch)
    report: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(),
        "capability": list(torch.cuda.get_device_capability()),
        "is_sm120_supported": utils["is_sm120_supported"](),
        "unpatched": _call(package, original, utils, driver, torch),
        "patched": _call(package, patched, utils, driver, torch),
    }
    report["same_on_this_gpu"] = report["unpatched"] == report["patched"]
    # The SM12x branch, on this driver: the release's probe answers yes, nothing else changes.
    sm12x = dict(utils, is_sm120_supported=lambda: True)
    report["sm12x_branch"] = _call(package, patched, sm12x, driver, torch)
    return report


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1])), indent=2))
