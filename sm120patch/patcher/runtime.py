"""``verify --runtime``: import the patched modules in the serving interpreter.

Proves that the patched tree still imports and shows whether this host takes the SM12x
branch: the release's own SM120 probe, then each patched module's cached SM flags.
``import_check``'s JSON answer is read into ``RuntimeCheck``; its ``to_json`` writes it back
in the same shape (``verify --json``'s ``runtime``).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sm120patch.errors import EnvironmentProblem, ExitCode
from sm120patch.patcher.remote import import_check
from sm120patch.runner import ProbeError, run_script
from sm120patch.sglang import static_names
from sm120patch.sglang.tree import SglangTree


def dotted(rel: str) -> str:
    """``srt/layers/communicator.py`` -> ``sglang.srt.layers.communicator``."""
    return "sglang." + rel.removesuffix(".py").replace("/", ".")


def spelling(tree: SglangTree) -> str:
    return (
        "platform" if static_names.defines(tree.package_dir, "sglang.srt.runtime_context", "get_platform") else "helper"
    )


@dataclass(frozen=True)
class TorchImport:
    ok: bool
    version: str | None = None
    cuda: str | None = None
    capability: tuple[int, int] | None = None  # the current device's, when torch sees a GPU
    device: str | None = None  # its name
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        if not self.ok:
            return {"ok": False, "error": self.error}
        data: dict[str, Any] = {"ok": True, "version": self.version, "cuda": self.cuda}
        if self.capability is not None:
            data["capability"] = list(self.capability)
        if self.device is not None:
            data["device"] = self.device
        return data


@dataclass(frozen=True)
class SglangImport:
    ok: bool
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"ok": True} if self.ok else {"ok": False, "error": self.error}


@dataclass(frozen=True)
class Sm120Probe:
    """The release's own "SM12x?" asked in the serving interpreter."""

    ok: bool
    expression: str | None = None  # get_platform().is_sm120 or is_sm120_supported()
    value: bool | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        if not self.ok:
            return {"ok": False, "error": self.error}
        return {"ok": True, "expression": self.expression, "value": self.value}


@dataclass(frozen=True)
class ModuleImport:
    module: str
    ok: bool
    flags: Mapping[str, bool] = field(default_factory=dict)  # its cached SM flags, when it imported
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        if not self.ok:
            return {"module": self.module, "ok": False, "error": self.error}
        return {"module": self.module, "ok": True, "flags": dict(self.flags)}


@dataclass(frozen=True)
class RuntimeCheck:
    """What the serving interpreter imported; a step not reached is None."""

    python: str | None
    torch: TorchImport | None
    sglang: SglangImport | None
    probe: Sm120Probe | None
    modules: tuple[ModuleImport, ...]
    exit_code: int  # import_check's: 3 when torch does not import, 4 when sglang does not

    def to_json(self) -> dict[str, Any]:
        return {
            "python": self.python,
            "torch": self.torch.to_json() if self.torch else None,
            "sglang": self.sglang.to_json() if self.sglang else None,
            "probe": self.probe.to_json() if self.probe else None,
            "modules": [m.to_json() for m in self.modules],
            "exit_code": self.exit_code,
        }


def check(tree: SglangTree, rels: list[str], python: str, timeout: float) -> RuntimeCheck:
    """Run ``import_check`` in ``python`` with ``tree`` first on its path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree.package_dir.parent), env.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryDirectory(prefix="sm120patch-runtime-") as scratch:
        out = Path(scratch) / "result.json"
        args = [str(out), spelling(tree), *map(dotted, rels)]
        step = "import the patched modules"
        try:
            proc = run_script(python, import_check.__file__, args, step=step, timeout=timeout, env=env, cwd=scratch)
        except ProbeError as exc:
            raise EnvironmentProblem(str(exc)) from exc
        try:
            data = json.loads(out.read_bytes().decode("utf-8", "replace"))
        except (OSError, ValueError, RecursionError) as exc:
            raise EnvironmentProblem(f"{python} could not {step}: {proc.last_line()}") from exc
    if not isinstance(data, dict):
        raise EnvironmentProblem(f"{python} answered the runtime check with a JSON {type(data).__name__}")
    return parse(data, proc.returncode)


def parse(data: Mapping[str, object], exit_code: int) -> RuntimeCheck:
    """``import_check``'s JSON object, typed.  A section of another shape than it writes reads
    as not reached (None), a module entry of another shape as a failed import."""
    torch, package, probe = (_section(data.get(key)) for key in ("torch", "sglang", "probe"))
    modules = data.get("modules")
    return RuntimeCheck(
        python=_text(data.get("python")),
        torch=None if torch is None else _torch(torch),
        sglang=None if package is None else SglangImport(package.get("ok") is True, _text(package.get("error"))),
        probe=None if probe is None else _probe(probe),
        modules=tuple(_module(m) for m in modules) if isinstance(modules, list) else (),
        exit_code=exit_code,
    )


def _torch(data: Mapping[str, object]) -> TorchImport:
    capability = data.get("capability")
    pair = (
        (capability[0], capability[1])
        if isinstance(capability, list) and len(capability) == 2 and all(type(n) is int for n in capability)
        else None
    )
    return TorchImport(
        data.get("ok") is True,
        _text(data.get("version")),
        _text(data.get("cuda")),
        pair,
        _text(data.get("device")),
        _text(data.get("error")),
    )


def _probe(data: Mapping[str, object]) -> Sm120Probe:
    value = data.get("value")
    return Sm120Probe(
        data.get("ok") is True,
        _text(data.get("expression")),
        value if isinstance(value, bool) else None,
        _text(data.get("error")),
    )


def _module(entry: object) -> ModuleImport:
    if not isinstance(entry, Mapping):
        return ModuleImport("(unnamed)", False, error=f"odd import_check entry: {entry!r}")
    name = _text(entry.get("module")) or "(unnamed)"
    flags = entry.get("flags")
    if entry.get("ok") is not True or not isinstance(flags, Mapping):
        return ModuleImport(name, False, error=_text(entry.get("error")) or f"odd import_check entry: {entry!r}")
    return ModuleImport(name, True, {str(k): v for k, v in flags.items() if isinstance(v, bool)})


def _section(value: object) -> Mapping[str, object] | None:
    return value if isinstance(value, Mapping) else None


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def runtime_verdict(result: RuntimeCheck, python: str) -> tuple[ExitCode, str]:
    """The exit code and headline when the runtime check failed; ``ExitCode.OK`` and one line
    for the notes when it passed: does this host take the SM12x branch?"""
    torch = result.torch
    if torch is None or not torch.ok:
        return ExitCode.ENVIRONMENT, (
            f"torch does not import in {python} ({torch.error if torch else None}): the runtime check needs the "
            "interpreter that serves sglang (--python)"
        )
    package = result.sglang
    if package is None or not package.ok:
        return ExitCode.NOT_AS_ASKED, (
            f"sglang does not import in {python}: {package.error if package else None} (is this the interpreter "
            "that serves sglang, with its dependencies?)"
        )
    broken = [m for m in result.modules if not m.ok]
    if broken:
        return ExitCode.NOT_AS_ASKED, (
            f"the patched tree does not import in {python}: {broken[0].module}: {broken[0].error}"
        )
    probe = result.probe
    if probe is None or not probe.ok:
        return ExitCode.NOT_AS_ASKED, (
            f"the release's SM120 probe failed in {python}: {probe.error if probe else None}"
        )
    gpu = f"cc {'.'.join(map(str, torch.capability))}" if torch.capability else "no CUDA GPU visible to torch"
    branch = "takes" if probe.value else "does not take"
    return ExitCode.OK, (
        f"runtime: {probe.expression} = {probe.value} in {python} ({gpu}): this host {branch} "
        "the SM12x branches; every patched module imports"
    )
