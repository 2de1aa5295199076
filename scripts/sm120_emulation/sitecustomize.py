"""SM120 emulated at sglang's fusion gates only, for proving a patched sglang on Hopper GPUs.

Not a user feature: the GPU machines that prove sm120patch are H200s (SM90), where sglang's
own gates already fuse, so a run there cannot show that the *patched* gates open.  With this
directory first on ``PYTHONPATH`` (every process sglang spawns inherits it)::

    PYTHONPATH=scripts/sm120_emulation sm120patch bench --server --tp 2 ...

the modules sm120patch patches (``GATE_MODULES``) are executed while sglang's capability
checks answer as on an RTX PRO 6000: ``is_sm90_supported()`` and ``is_sm100_supported()``
False, ``is_sm120_supported()`` and ``is_blackwell_supported()`` True.  Those modules keep
the answers (their ``from sglang.srt.utils import ...`` names, their cached ``_is_sm*_supported``
flags); every other module of sglang, FlashInfer and sgl_kernel sees the real H200, so
attention, GEMM and the fused kernel itself still run their SM90 builds.

What it shows: an unpatched tree under it never takes the fused path (0 fused calls), a
patched tree does.  What it cannot show: PCIe without NVLink, FlashInfer's SM12x build of the
kernel, or SM120's figures.  Each gate module says on stderr, as it is imported, whether it
sees SM120 (or, if it bound the real checks, that the emulation did not take).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

GATE_MODULES = frozenset(
    {
        "sglang.srt.layers.communicator",
        "sglang.srt.layers.flashinfer_comm_fusion",
        "sglang.srt.server_args",
    }
)
UTILS_MODULES = ("sglang.srt.utils", "sglang.srt.utils.common")
SM120_ANSWERS: dict[str, bool] = {
    "is_sm90_supported": False,
    "is_sm100_supported": False,
    "is_sm120_supported": True,
    "is_blackwell_supported": True,
    "is_blackwell": True,
}


def _answer(value: bool) -> Callable[..., bool]:
    def check(*_args: Any, **_kwargs: Any) -> bool:
        return value

    check.__name__ = f"emulated_sm120_{value}"
    return check


def _emulated(check: object) -> bool:
    return getattr(check, "__name__", "").startswith("emulated_sm120_")


class _Emulated(importlib.abc.Loader):
    """Runs a gate module with the SM120 answers swapped into sglang's utils, then puts the
    real ones back: only that module binds the emulated checks."""

    def __init__(self, real: importlib.abc.Loader) -> None:
        self.real = real

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.real.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        saved: list[tuple[ModuleType, str, Any]] = []
        for name in UTILS_MODULES:
            utils = sys.modules.get(name)
            if utils is None and module.__name__ != name:
                try:
                    utils = __import__(name, fromlist=["_"])
                except ImportError:
                    continue
            for attr, value in SM120_ANSWERS.items():
                if utils is not None and hasattr(utils, attr):
                    saved.append((utils, attr, getattr(utils, attr)))
                    setattr(utils, attr, _answer(value))
        try:
            self.real.exec_module(module)
        finally:
            for utils, attr, value in reversed(saved):
                setattr(utils, attr, value)
        real = [a for a in SM120_ANSWERS if a in vars(module) and not _emulated(vars(module)[a])]
        sys.stderr.write(
            f"[sm120 emulation] {module.__name__}: "
            + (f"NOT emulated, it bound the real {', '.join(real)}\n" if real else "sees SM120\n")
        )


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in GATE_MODULES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Emulated(spec.loader)
                return spec
        return None


if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.insert(0, _Finder())
