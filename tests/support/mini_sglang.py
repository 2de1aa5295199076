"""A miniature sglang release written for the tests (not sglang's code).

It has the 0.5.11 layout of every file sm120patch patches, a dist-info with METADATA and a
RECORD of sha256 hashes as pip writes them, and imports with nothing but ``FakeTorch``
(tests/support/fakes.py).  The fast tier runs the whole tool on it; the slow tier runs real releases.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

VERSION = "0.5.11"
COMM = "srt/layers/communicator.py"
SERVER_ARGS = "srt/server_args.py"
FUSION = "srt/layers/flashinfer_comm_fusion.py"

FILES = {
    "__init__.py": "",
    "srt/__init__.py": "",
    "srt/utils/__init__.py": "from sglang.srt.utils.common import *\n",
    "srt/utils/common.py": (
        "import torch\n\n\n"
        "def is_cuda():\n    return torch.cuda.is_available()\n\n\n"
        "def _major():\n    return torch.cuda.get_device_capability()[0]\n\n\n"
        "def is_sm90_supported():\n    return is_cuda() and _major() == 9\n\n\n"
        "def is_sm100_supported():\n    return is_cuda() and _major() == 10\n\n\n"
        "def is_sm120_supported():\n    return is_cuda() and _major() == 12\n\n\n"
        "def ceil_align(x, y):\n    return (x + y - 1) // y * y\n"
    ),
    "srt/layers/__init__.py": "",
    COMM: (
        "from sglang.srt.utils import (\n"
        "    is_cuda,\n"
        "    is_sm90_supported,\n"
        "    is_sm100_supported,\n"
        ")\n\n"
        "_is_cuda = is_cuda()\n"
        "_is_sm90_supported = _is_cuda and is_sm90_supported()\n"
        "_is_sm100_supported = _is_cuda and is_sm100_supported()\n\n\n"
        "def apply_flashinfer_allreduce_fusion(batch_size: int):\n"
        "    return (\n"
        "        (_is_sm90_supported or _is_sm100_supported)\n"
        "        and batch_size > 0\n"
        "    )\n"
    ),
    SERVER_ARGS: (
        "from sglang.srt.utils import is_sm90_supported, is_sm100_supported\n\n\n"
        "class ServerArgs:\n"
        "    enable_flashinfer_allreduce_fusion: bool = False\n\n"
        "    def _handle_model_specific_adjustments(self):\n"
        "        if (\n"
        "            not self.enable_flashinfer_allreduce_fusion\n"
        "            and (is_sm90_supported() or is_sm100_supported())\n"
        "        ):\n"
        "            self.enable_flashinfer_allreduce_fusion = True\n"
    ),
    FUSION: (
        "from sglang.srt.utils import (\n"
        "    ceil_align,\n"
        ")\n\n\n"
        "def _flashinfer_trtllm_workspace_allocation_sizes(cuda_driver, prop, sizes):\n"
        "    allocation_sizes = []\n"
        "    for size in sizes:\n"
        "        err, granularity = cuda_driver.cuMemGetAllocationGranularity(prop, 0)\n"
        "        allocation_size = ceil_align(size + 2048, granularity)\n"
        "        mc_prop = cuda_driver.CUmulticastObjectProp()\n"
        "        err, mc_granularity = cuda_driver.cuMulticastGetGranularity(mc_prop, 0)\n"
        "        if err != 0:\n"
        "            raise RuntimeError(f'cuMulticastGetGranularity failed: {err}')\n"
        "        allocation_size = ceil_align(allocation_size, mc_granularity)\n"
        "        allocation_sizes.append(allocation_size)\n"
        "    return allocation_sizes\n"
    ),
}


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_mini_sglang(site: Path, version: str = VERSION, files: dict[str, str] | None = None) -> Path:
    """The miniature release installed under ``site`` (with its dist-info and RECORD);
    returns its ``sglang`` package directory."""
    rows = []
    for rel, text in (files or FILES).items():
        path = site / "sglang" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        rows.append(f"sglang/{rel},{_record_hash(text.encode())},{len(text.encode())}")
    dist = site / f"sglang-{version}.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    rows += [f"{dist.name}/METADATA,,", f"{dist.name}/RECORD,,"]
    (dist / "RECORD").write_text("\n".join(rows) + "\n")
    return site / "sglang"


OVERRIDES = "srt/arg_groups/overrides.py"
#: The miniature release in the 0.5.15 layout: the model auto-enable moved to arg_groups/ (on the
#: fused path by its name) and the backend resolver beside the preflight, both as 0.5.15 has them.
FILES_0_5_15 = {
    **FILES,
    "srt/arg_groups/__init__.py": "",
    OVERRIDES: (
        "from sglang.srt.utils.common import (\n"
        "    is_sm90_supported,\n"
        "    is_sm100_supported,\n"
        ")\n\n\n"
        "def _flashinfer_allreduce_fusion_auto_enable(view) -> dict:\n"
        "    if (\n"
        "        view.flashinfer_allreduce_fusion_backend is None\n"
        "        and (is_sm90_supported() or is_sm100_supported())\n"
        "        and (view.nnodes == 1 or is_sm100_supported())\n"
        "    ):\n"
        "        return {'flashinfer_allreduce_fusion_backend': 'auto'}\n"
        "    return {}\n"
    ),
    FUSION: FILES[FUSION].replace(
        "    ceil_align,\n", "    ceil_align,\n    is_sm90_supported,\n    is_sm100_supported,\n"
    )
    + (
        "\n\ndef _resolve_backend(backend: str, is_multi_node: bool = False) -> str:\n"
        "    if not (is_sm90_supported() or is_sm100_supported()):\n"
        "        raise ValueError('FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs.')\n"
        "    return 'trtllm'\n"
    ),
}
