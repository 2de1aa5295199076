"""Find the installed sglang: in this interpreter, or by asking another one (``--python``)
with the find_sglang script, which imports nothing from sm120patch."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from sm120patch.errors import EnvironmentProblem
from sm120patch.runner import DEFAULT_TIMEOUT_S, ProbeError, run_script
from sm120patch.sglang.tree import (
    SglangTree,
    checkout_version,
    from_directory,
    install_kind,
    interpreter,
    no_code_found,
)


def _from_probe(data: dict[str, Any], how_found: str) -> SglangTree | None:
    if not data.get("package_dir"):
        return None
    package_dir = Path(data["package_dir"])
    dist_info = Path(data["dist_info"]) if data.get("dist_info") else None
    return SglangTree(
        package_dir=package_dir,
        # No version from a distribution (a .pth to a checkout, a METADATA without one): read
        # as --sglang-path reads the same tree.
        version=data.get("version") or checkout_version(package_dir),
        install_kind=install_kind(dist_info, data.get("direct_url")),
        dist_info=dist_info,
        how_found=how_found,
        python=data.get("python"),
        flashinfer=data.get("flashinfer"),
        flashinfer_dir=Path(data["flashinfer_dir"]) if data.get("flashinfer_dir") else None,
        linked_from=Path(data["package_link"]) if isinstance(data.get("package_link"), str) else None,
    )


def run_probe(python: str, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """Run the stdlib probe in another interpreter and return what it found."""
    exe = interpreter(python)
    if exe.is_symlink() and not exe.exists():
        raise EnvironmentProblem(
            f"--python {python}: a broken environment: {exe} links to {os.path.realpath(exe)}, which is gone "
            "(the Python it was made with was upgraded or removed); recreate the environment",
            code="bad-python",
        )
    if exe.is_dir():
        raise EnvironmentProblem(
            f"--python {python}: a folder without bin/python, not an environment root; give its interpreter",
            code="bad-python",
        )
    if not exe.exists():
        raise EnvironmentProblem(f"--python {python}: no such interpreter", code="bad-python")
    from sm120patch.runner.remote import find_sglang

    try:
        answer = run_script(str(exe), find_sglang.__file__, step="look for sglang", timeout=timeout)
    except ProbeError as exc:
        raise EnvironmentProblem(f"--python {python}: {exc}", code="bad-python") from exc
    if answer.returncode != 0:
        raise EnvironmentProblem(
            f"--python {python}: {exe} could not look for sglang: {answer.last_line()}", code="bad-python"
        )
    data = _understood(answer.stdout)
    if data is None:
        lines = [line.strip() for line in answer.stdout.splitlines() if line.strip()]
        first = lines[0][:200] if lines else "(nothing on stdout)"
        raise EnvironmentProblem(
            f"--python {python}: the answer of {exe} was not understood (not find_sglang's JSON); "
            f"its first line: {first}",
            code="bad-python",
        )
    return data


#: find_sglang's answer: each key and the types its value may have (None: found nothing).
_ANSWER = {
    "python": (str, type(None)),
    "sys_path": (list,),
    "package_dir": (str, type(None)),
    "version": (str, type(None)),
    "dist_info": (str, type(None)),
    "direct_url": (dict, type(None)),
    "flashinfer": (str, type(None)),
    "flashinfer_dir": (str, type(None)),
}


def _understood(stdout: str) -> dict[str, Any] | None:
    """stdout as find_sglang's answer, or None when it is something else: an answer read
    as "no sglang" would send the user looking in the wrong place."""
    try:
        data = json.loads(stdout)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or any(not isinstance(data.get(k), t) for k, t in _ANSWER.items()):
        return None
    return data if all(isinstance(p, str) for p in data["sys_path"]) else None


def locate(
    python: str | None = None, sglang_path: Path | None = None, timeout: float = DEFAULT_TIMEOUT_S
) -> SglangTree:
    """Find sglang without importing it; EnvironmentProblem (exit 2) says what was searched.
    ``timeout``: how long another interpreter (``python``) may take to answer."""
    if python and sglang_path:
        raise EnvironmentProblem("give either --python or --sglang-path, not both", code="usage")
    if sglang_path is not None:
        return from_directory(sglang_path)
    if python:
        data = run_probe(python, timeout)
        how = f"--python {python}"
    else:
        from sm120patch.runner.remote import find_sglang

        data = find_sglang.find()
        how = f"this interpreter ({sys.executable})"
    tree = _from_probe(data, how)
    if tree is None:
        paths = "\n  ".join(data.get("sys_path") or ["(empty)"])
        raise EnvironmentProblem(
            f"no sglang found in {how}.\nSearched sys.path:\n  {paths}\n"
            "Pass --python /path/to/the/serving/env/bin/python (e.g. when sm120patch runs "
            "from pipx), or --sglang-path DIR (the sglang package directory), or run "
            "`sm120patch demo` to try it on a downloaded release.",
            code="no-sglang",
        )
    if not os.access(tree.package_dir, os.R_OK):
        raise EnvironmentProblem(f"{tree.package_dir}: not readable", code="unreadable")
    if not (tree.package_dir / "__init__.py").is_file():
        raise EnvironmentProblem(no_code_found(tree.package_dir, how), code="no-sglang")
    return tree


def default_python(tree: SglangTree | None, python: str | None) -> str:
    """The interpreter that serves sglang: --python (an env root stands for its python), the
    one the tree was found in, or ours."""
    if python:
        return str(interpreter(python))
    if tree is not None and tree.python:
        return tree.python
    return sys.executable
