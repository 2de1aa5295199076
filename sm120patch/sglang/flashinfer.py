"""Whether the FlashInfer beside sglang builds the trtllm allreduce kernel for SM12x.

Read from the installed code, not the version number: ``gen_trtllm_comm_module`` in
``flashinfer/jit/comm.py`` passes ``supported_major_versions=[9, 10]`` up to 0.6.16 and
``[9, 10, 12]`` from 0.6.17 (flashinfer#3903).  Only when that file has another shape does
the version decide, and the answer says so.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

FIRST_SM12X = Version("0.6.17")  # flashinfer#3903
MODULE = "jit/comm.py"
BUILDER = "gen_trtllm_comm_module"


@dataclass(frozen=True)
class FlashInfer:
    version: str | None
    package_dir: Path | None
    majors: tuple[int, ...] | None  # supported_major_versions read from the code
    sm12x_kernel: bool | None  # None: FlashInfer not found, or nothing to judge by
    source: str  # where the answer comes from, for reports

    @property
    def found(self) -> bool:
        return self.version is not None or self.package_dir is not None


def supported_majors(comm_py: Path) -> tuple[int, ...] | None:
    """``supported_major_versions`` of ``gen_trtllm_comm_module``, or None if not that shape."""
    try:
        tree = ast.parse(comm_py.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == BUILDER:
            for call in ast.walk(node):
                if isinstance(call, ast.Call):
                    for keyword in call.keywords:
                        if keyword.arg == "supported_major_versions":
                            try:
                                value = ast.literal_eval(keyword.value)
                            except ValueError:
                                return None
                            if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
                                return tuple(value)
                            return None
    return None


def by_version(version: str | None) -> bool | None:
    """Whether FlashInfer ``version`` has the SM12x kernel, by its number alone (for a pin,
    where no code is at hand); None for no version or one that does not parse."""
    if not version:
        return None
    try:
        # By release number: flashinfer#3903 is in 0.6.17's release candidates too (v0.6.17rc1).
        return Version(version).release >= FIRST_SM12X.release
    except InvalidVersion:
        return None


def inspect(version: str | None, package_dir: Path | None) -> FlashInfer:
    """What the installed FlashInfer (``package_dir``: the ``flashinfer`` package) can do."""
    if package_dir is not None:
        comm = package_dir / MODULE
        majors = supported_majors(comm)
        if majors is not None:
            return FlashInfer(
                version,
                package_dir,
                majors,
                12 in majors,
                f"{comm}: {BUILDER}(supported_major_versions={list(majors)})",
            )
        judged = by_version(version)
        return FlashInfer(
            version,
            package_dir,
            None,
            judged,
            f"{comm} has no {BUILDER}(supported_major_versions=[...]) to read; judged by the "
            f"version against {FIRST_SM12X} (flashinfer#3903)",
        )
    if version is not None:
        return FlashInfer(
            version,
            None,
            None,
            by_version(version),
            f"version {version} against {FIRST_SM12X} (flashinfer#3903); its code was not found",
        )
    return FlashInfer(None, None, None, None, "no flashinfer package found beside sglang")


def sibling_package(site: Path) -> Path | None:
    """The ``flashinfer`` package installed beside sglang (same site-packages)."""
    candidate = site / "flashinfer"
    return candidate if (candidate / "__init__.py").is_file() else None
