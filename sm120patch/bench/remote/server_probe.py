"""What ``sm120patch bench server`` needs to know before it starts sglang: torch, the GPUs
it sees, and how much memory each has free (``torch.cuda.mem_get_info``).

``python server_probe.py N`` prints one JSON object; memory is read for the first ``N``
GPUs only (each read creates a CUDA context).  Standard library plus torch, any Python >= 3.8,
no import from sm120patch.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict


def probe(want: int) -> Dict[str, Any]:
    out: Dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": {"ok": False},
        "gpus": [],
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    try:
        import torch
    except Exception as exc:  # ImportError, or a broken install
        out["torch"]["error"] = "%s: %s" % (type(exc).__name__, exc)
        return out
    out["torch"] = {"ok": True, "version": getattr(torch, "__version__", None)}
    out["torch"]["cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
    try:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception as exc:
        out["torch"]["error"] = "%s: %s" % (type(exc).__name__, exc)
        return out
    for index in range(count):
        gpu: Dict[str, Any] = {
            "index": index,
            "name": torch.cuda.get_device_name(index),
            "capability": list(torch.cuda.get_device_capability(index)),
        }
        if index < want:
            try:
                free, total = torch.cuda.mem_get_info(index)
                gpu["free_bytes"], gpu["total_bytes"] = int(free), int(total)
            except Exception as exc:
                gpu["memory_error"] = "%s: %s" % (type(exc).__name__, exc)
        out["gpus"].append(gpu)
    return out


if __name__ == "__main__":
    print(json.dumps(probe(int(sys.argv[1]) if len(sys.argv) > 1 else 0)))
