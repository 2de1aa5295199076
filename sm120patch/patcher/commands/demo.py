"""``sm120patch demo``: the whole cycle on a real sglang release in a scratch directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path

from rich.console import Console
from rich.rule import Rule
from rich.text import Text

from sm120patch.errors import EnvironmentProblem
from sm120patch.output.console import printable
from sm120patch.output.lines import put
from sm120patch.patcher.commands.apply import apply
from sm120patch.patcher.commands.revert import revert
from sm120patch.patcher.commands.verify import verify
from sm120patch.patcher.plan.registry import all_patches
from sm120patch.patcher.render import as_text
from sm120patch.patcher.transaction.fsutil import sha256_file
from sm120patch.sglang.tree import from_directory

DEMO_VERSION = "0.5.9"  # the release the original hand fix (sed + grep) was verified on


def cache_root() -> Path:
    """Where downloads are kept: ``SM120PATCH_CACHE``, else ``$XDG_CACHE_HOME/sm120patch``."""
    base = os.environ.get("SM120PATCH_CACHE")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "sm120patch"


def wheel_cache() -> Path:
    base = os.environ.get("SM120PATCH_WHEEL_CACHE")
    return Path(base) if base else cache_root() / "wheels"


def fetch(dist: str, version: str) -> Path:
    """A wheel of ``dist==version`` for this interpreter from the cache, or downloaded
    (without dependencies) into it."""
    cache = wheel_cache()
    prefix = dist.replace("-", "_")
    cached = sorted(cache.glob(f"{prefix}-{version}-*.whl"))
    if cached:
        return cached[0]
    cache.mkdir(parents=True, exist_ok=True)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    platforms = [f"manylinux_2_{n}_x86_64" for n in (34, 28, 17)] + ["manylinux2014_x86_64", "any"]
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
    cmd += ["--disable-pip-version-check", "--python-version", python, "--implementation", "cp"]
    cmd += [arg for platform in platforms for arg in ("--platform", platform)]
    proc = subprocess.run([*cmd, "-d", str(cache), f"{dist}=={version}"], capture_output=True, text=True)
    cached = sorted(cache.glob(f"{prefix}-{version}-*.whl"))
    if proc.returncode != 0 or not cached:
        if "No module named pip" in proc.stderr:
            raise EnvironmentProblem(
                f"could not download {dist}=={version}: {sys.executable} has no pip (a uv venv has none unless asked)",
                code="download",
            )
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvironmentProblem(f"could not download {dist}=={version} with pip: {tail}", code="download")
    return cached[0]


def fetch_wheel(version: str) -> Path:
    """The sglang wheel of ``version`` (see ``fetch``)."""
    return fetch("sglang", version)


def install_wheel(wheel: Path, site: Path, cached: bool = False) -> Path:
    """Unpack a wheel the way pip lays it out in site-packages (RECORD included).  A file
    that is not a readable sglang wheel is one sentence (exit 2); a ``cached`` one
    (downloaded earlier) is named as corrupt, with the fix."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:  # EOFError: a zip cut short
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        if cached:
            raise EnvironmentProblem(
                f"the cached wheel {wheel} is corrupt ({why}); delete it (rm '{wheel}') and run "
                "`sm120patch demo` again to download it afresh",
                code="download",
            ) from exc
        raise EnvironmentProblem(f"--wheel {wheel}: not a readable wheel ({why})", code="download") from exc
    if not (site / "sglang" / "__init__.py").is_file():
        raise EnvironmentProblem(
            f"--wheel {wheel}: not an sglang wheel (it has no sglang/__init__.py)", code="download"
        )
    return site / "sglang"


def _refused(out: Console, version: str | None) -> int:
    """A release sm120patch refuses has no cycle to show: the report above says why; the
    steps after it would fail for that one reason, and FlashInfer's kernel is moot there."""
    out.print(Rule("result"))
    put(
        out,
        Text.assemble(
            ("demo stopped", "bold red"),
            f": sm120patch refuses sglang {version or '(unknown version)'} (above), so there is no cycle to show; "
            f"`sm120patch demo` alone runs it on sglang {DEMO_VERSION}",
        ),
    )
    return 1


def run_demo(version: str | None, wheel: Path | None, keep: bool) -> int:
    out = as_text.console()
    version = version or DEMO_VERSION
    cached = wheel is None
    if wheel is None:
        try:
            wheel = fetch_wheel(version)
        except EnvironmentProblem as exc:  # no pip, no network: a wheel fetched elsewhere does it
            raise EnvironmentProblem(
                f"{exc}; download it where pip works (`pip download --no-deps sglang=={version}`) "
                "and give it: `sm120patch demo --wheel FILE`",
                code=exc.code,
            ) from exc
    scratch = Path(tempfile.mkdtemp(prefix="sm120patch-demo-"))
    try:
        tree = from_directory(install_wheel(wheel, scratch / "site-packages", cached))
        # Wrapped at spaces: the folder, on a line of its own if need be, is copied whole.
        said = Text.assemble(("sm120patch demo", "bold"), f": {wheel.name} unpacked into {scratch}")
        put(out, said)
        steps = [
            ("apply", lambda: apply(tree, list(all_patches()))),
            ("verify", lambda: verify(tree)),
            ("apply again (must change nothing)", lambda: apply(tree, list(all_patches()))),
            ("revert", lambda: revert(tree)),
        ]
        failed: list[str] = []
        warnings: list[str] = []
        for number, (title, step) in enumerate(steps):
            outcome = step()
            warnings += outcome.warnings
            outcome.warnings, outcome.notes = [], []  # said once, below
            if number == 0:  # the whole report once; then one line a step
                out.print(Rule(f"sm120patch {title}"))
                as_text.render(outcome, brief=True)
                if outcome.plan is not None and outcome.plan.refusal:
                    return _refused(out, tree.version)
                out.print(Rule("then"))
            else:
                mark = ("ok", "green") if outcome.exit_code == 0 else ("FAILED", "bold red")
                put(out, Text.assemble(mark, f" sm120patch {title}: {printable(outcome.headline)}"))
            if outcome.exit_code != 0:
                failed.append(title)
        final = verify(tree).plan
        touched = sorted({r.file for r in final.reports}) if final and not failed else []
        mismatched = [rel for rel in touched if sha256_file(tree.path(rel)) != tree.record.sha256(rel)]
        for warning in dict.fromkeys(warnings):
            put(out, Text.assemble(("warning: ", "bold yellow"), (printable(warning), "yellow")))
        out.print(Rule("result"))
        if failed or mismatched:
            why = f" in {', '.join(failed)}" if failed else ""
            if mismatched:
                why += f": not as released (RECORD): {', '.join(f'sglang/{r}' for r in mismatched)}"
            put(out, Text.assemble(("demo failed", "bold red"), why))
            return 1
        ok = (
            f": sglang {tree.version} patched, verified, re-applied as a no-op "
            f"and reverted; its {len(touched)} files match their RECORD hashes again"
        )
        put(out, Text.assemble(("demo ok", "bold green"), ok))
        put(
            out,
            "On the GPU host, in the environment that serves sglang: `sm120patch apply`, then "
            "`sm120patch doctor --tp N` and `sm120patch bench kernel --tp N` "
            "(pipx: add --python /path/to/env/bin/python).",
        )
        return 0
    finally:
        if keep:
            put(out, f"scratch directory kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
