"""Import the patched sglang modules in the serving interpreter and read their SM flags.

``sm120patch verify --runtime`` runs this file with the interpreter that serves sglang:
``import_check.py OUT SPELLING MODULE...``.  It writes one JSON object to OUT (modules
may print on import, so stdout is not used).  SPELLING is how the release asks "SM12x?":
``platform`` (``get_platform().is_sm120``, 0.5.19+) or ``helper`` (``is_sm120_supported()``).
Exit 3 when torch does not import (the tool's environment error), 4 when sglang itself
does not.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import traceback
from typing import Any

FLAG = re.compile(r"^_is_(sm\d+|blackwell)(_supported)?$")

#: What importing arbitrary sglang code may raise: any Exception (ImportError, OSError for a
#: missing CUDA library, RuntimeError, ...) and SystemExit, which a module's dependency check
#: may call at import time.  Each is a failure to report, not the end of the probe.
#: KeyboardInterrupt and GeneratorExit are not: Ctrl-C stops the probe.
IMPORT_FAILURES = (Exception, SystemExit)


def _last_line(exc: BaseException) -> str:
    return traceback.format_exception_only(type(exc), exc)[-1].strip()


def _sm120(spelling: str) -> tuple[str, bool]:
    if spelling == "platform":
        from sglang.srt.runtime_context import get_platform

        return "get_platform().is_sm120", bool(get_platform().is_sm120)
    from sglang.srt.utils import is_sm120_supported

    return "is_sm120_supported()", bool(is_sm120_supported())


def main(argv: list[str]) -> int:
    out_path, spelling, modules = argv[1], argv[2], argv[3:]
    result: dict[str, Any] = {"python": sys.executable, "torch": None, "sglang": None, "probe": None, "modules": []}
    code = 0
    try:
        import torch

        result["torch"] = {"ok": True, "version": torch.__version__, "cuda": torch.version.cuda}
        if torch.cuda.is_available():
            result["torch"]["capability"] = list(torch.cuda.get_device_capability())
            result["torch"]["device"] = torch.cuda.get_device_name()
    except IMPORT_FAILURES as exc:  # reported, and the exit code says it
        result["torch"] = {"ok": False, "error": _last_line(exc)}
        code = 3
    if code == 0:
        # sglang itself first: when its own dependencies are missing every module fails the
        # same way, and later imports would only show the debris of the first failure.
        try:
            importlib.import_module("sglang")
            result["sglang"] = {"ok": True}
        except IMPORT_FAILURES as exc:
            result["sglang"] = {"ok": False, "error": _last_line(exc)}
            code = 4
    if code == 0:
        try:
            expression, value = _sm120(spelling)
            result["probe"] = {"ok": True, "expression": expression, "value": value}
        except IMPORT_FAILURES as exc:
            result["probe"] = {"ok": False, "error": _last_line(exc)}
        for name in modules:
            entry: dict[str, Any] = {"module": name}
            try:
                module = importlib.import_module(name)
            except IMPORT_FAILURES as exc:
                entry.update(ok=False, error=_last_line(exc))
            else:
                flags = {k: v for k, v in sorted(vars(module).items()) if FLAG.match(k) and isinstance(v, bool)}
                entry.update(ok=True, flags=flags)
            result["modules"].append(entry)
    with open(out_path, "w") as fh:
        json.dump(result, fh)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
