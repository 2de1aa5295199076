"""``verify --runtime``: import the patched modules in the serving interpreter.

Proves that the patched tree still imports and shows whether this host takes the SM12x
branch: the release's own SM120 probe, then each patched module's cached SM flags.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from sm120patch import runtime_probe, static_names
from sm120patch.errors import EnvironmentProblem
from sm120patch.interpreter import run_script
from sm120patch.locate import SglangTree

TORCH_MISSING = 3  # runtime_probe's exit code when torch does not import


def dotted(rel: str) -> str:
    """``srt/layers/communicator.py`` -> ``sglang.srt.layers.communicator``."""
    return "sglang." + rel.removesuffix(".py").replace("/", ".")


def spelling(tree: SglangTree) -> str:
    return (
        "platform"
        if static_names.defines(tree.package_dir, "sglang.srt.runtime_context", "get_platform")
        else "helper"
    )


def check(tree: SglangTree, rels: list[str], python: str, timeout: float) -> dict[str, Any]:
    """Run ``runtime_probe`` in ``python`` with ``tree`` first on its path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(tree.package_dir.parent), env.get("PYTHONPATH", "")) if p
    )
    with tempfile.TemporaryDirectory(prefix="sm120patch-runtime-") as scratch:
        out = Path(scratch) / "result.json"
        args = [str(out), spelling(tree), *map(dotted, rels)]
        try:
            proc = run_script(python, runtime_probe.__file__, args, timeout=timeout, env=env, cwd=scratch)
        except subprocess.TimeoutExpired as exc:
            raise EnvironmentProblem(
                f"importing the patched modules in {python} took over {timeout:.0f}s; "
                "raise --timeout or check the interpreter"
            ) from exc
        except OSError as exc:
            raise EnvironmentProblem(f"could not run {python} ({exc.strerror})") from exc
        try:
            data: dict[str, Any] = json.loads(out.read_text())
        except (OSError, ValueError) as exc:
            last = (proc.stderr.strip() or f"exit {proc.returncode}").splitlines()[-1]
            raise EnvironmentProblem(f"{python} could not run the runtime check: {last}") from exc
    data["exit_code"] = proc.returncode
    return data
