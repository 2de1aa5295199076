"""A miniature sglang tree written for the tests (not sglang's code): the 0.5.9 layout of
the files sm120patch patches, small enough to import with only ``FakeTorch``."""

from __future__ import annotations

from pathlib import Path

FILES = {
    "__init__.py": "",
    "version.py": '__version__ = "0.5.9"\n',
    "srt/__init__.py": "",
    "srt/utils/__init__.py": (
        "import torch\n\n\n"
        "def is_cuda():\n    return torch.cuda.is_available()\n\n\n"
        "def _major():\n    return torch.cuda.get_device_capability()[0]\n\n\n"
        "def is_sm90_supported():\n    return is_cuda() and _major() == 9\n\n\n"
        "def is_sm100_supported():\n    return is_cuda() and _major() == 10\n\n\n"
        "def is_sm120_supported():\n    return is_cuda() and _major() == 12\n"
    ),
    "srt/layers/__init__.py": "",
    "srt/layers/communicator.py": (
        "from sglang.srt.utils import (\n"
        "    is_cuda,\n"
        "    is_sm90_supported,\n"
        "    is_sm100_supported,\n"
        ")\n\n"
        "_is_cuda = is_cuda()\n"
        "_is_sm90_supported = _is_cuda and is_sm90_supported()\n"
        "_is_sm100_supported = _is_cuda and is_sm100_supported()\n\n\n"
        "def apply_flashinfer_allreduce_fusion(batch_size: int):\n"
        "    return (_is_sm90_supported or _is_sm100_supported) and batch_size > 0\n"
    ),
    "srt/server_args.py": (
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
}


def write_mini_sglang(site: Path) -> Path:
    """The miniature tree under ``site``; returns its ``sglang`` package directory."""
    for rel, text in FILES.items():
        path = site / "sglang" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return site / "sglang"
