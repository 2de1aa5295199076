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

from sm120patch.errors import EnvironmentProblem, ExitCode
from sm120patch.locate.tree import SglangTree
from sm120patch.patchkit import static_names
from sm120patch.probes import import_check, run_script


def dotted(rel: str) -> str:
    """``srt/layers/communicator.py`` -> ``sglang.srt.layers.communicator``."""
    return "sglang." + rel.removesuffix(".py").replace("/", ".")


def spelling(tree: SglangTree) -> str:
    return (
        "platform" if static_names.defines(tree.package_dir, "sglang.srt.runtime_context", "get_platform") else "helper"
    )


def check(tree: SglangTree, rels: list[str], python: str, timeout: float) -> dict[str, Any]:
    """Run ``import_check`` in ``python`` with ``tree`` first on its path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree.package_dir.parent), env.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryDirectory(prefix="sm120patch-runtime-") as scratch:
        out = Path(scratch) / "result.json"
        args = [str(out), spelling(tree), *map(dotted, rels)]
        try:
            proc = run_script(python, import_check.__file__, args, timeout=timeout, env=env, cwd=scratch)
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


def verdict(data: dict[str, Any], python: str) -> tuple[ExitCode, str] | None:
    """The exit code and headline when the runtime check failed; None when it passed."""
    torch = data.get("torch") or {}
    if not torch.get("ok"):
        return ExitCode.ENVIRONMENT, (
            f"torch does not import in {python} ({torch.get('error')}): the runtime check needs the "
            "interpreter that serves sglang (--python)"
        )
    package = data.get("sglang") or {}
    if not package.get("ok"):
        return ExitCode.NOT_AS_ASKED, (
            f"sglang does not import in {python}: {package.get('error')} (is this the interpreter that "
            "serves sglang, with its dependencies?)"
        )
    broken = [m for m in data["modules"] if not m["ok"]]
    if broken:
        return ExitCode.NOT_AS_ASKED, (
            f"the patched tree does not import in {python}: {broken[0]['module']}: {broken[0]['error']}"
        )
    probe = data.get("probe") or {}
    if not probe.get("ok"):
        return ExitCode.NOT_AS_ASKED, f"the release's SM120 probe failed in {python}: {probe.get('error')}"
    return None


def summary(data: dict[str, Any], python: str) -> str:
    """One line for a passed runtime check: does this host take the SM12x branch?"""
    torch, probe = data["torch"], data["probe"]
    gpu = f"cc {'.'.join(map(str, torch['capability']))}" if torch.get("capability") else "no CUDA GPU visible to torch"
    branch = "takes" if probe["value"] else "does not take"
    return (
        f"runtime: {probe['expression']} = {probe['value']} in {python} ({gpu}): this host {branch} "
        "the SM12x branches; every patched module imports"
    )
