"""Locate the sglang to patch: this interpreter, another one (``--python``) or a directory."""

from __future__ import annotations

import base64
import csv
import fnmatch
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from sm120patch.errors import EnvironmentProblem
from sm120patch.locate import flashinfer as flashinfer_kernel
from sm120patch.probes import DEFAULT_TIMEOUT_S, ProbeError, run_script
from sm120patch.transaction.state import DIRNAME


class InstallKind(str, Enum):
    WHEEL = "wheel"  # pip-installed release: RECORD says what the pristine files are
    EDITABLE = "editable"  # pip install -e of a checkout: edits the user's checkout
    PATH = "path"  # a directory given by --sglang-path without install metadata


@dataclass(frozen=True)
class Record:
    """The wheel's RECORD: sha256 of every installed file, as pip wrote it.  Looked up per
    file (a RECORD lists thousands; sm120patch asks about three)."""

    text: str
    prefix: str | None  # the package directory as RECORD spells it ("sglang/")
    problem: str | None = None  # why the pristine check is off, when it is

    def sha256(self, rel: str) -> str | None:
        if self.prefix is None:
            return None
        start = self.text.find(f"\n{self.prefix}{rel},")  # ``text`` starts with a newline
        if start < 0:
            return None
        row = self.text[start + 1 :].partition("\n")[0]
        _, digest, *_ = next(csv.reader([row]))
        if not digest.startswith("sha256="):
            return None
        # Unpadded urlsafe base64 of 32 bytes; anything else (a RECORD edited by hand or cut
        # short) says nothing about the file.
        text = digest.removeprefix("sha256=")
        try:
            raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars="-_", validate=True)
        except ValueError:  # binascii.Error is a ValueError
            return None
        return raw.hex() if len(raw) == 32 else None


PCIE_IPC_MODULE = "srt/distributed/device_communicators/pcie_ipc_ar.py"


@dataclass(frozen=True)
class SglangTree:
    """An sglang package directory and what is known about how it got there."""

    package_dir: Path
    version: str | None
    install_kind: InstallKind
    dist_info: Path | None
    how_found: str
    python: str | None = None
    flashinfer: str | None = None  # the installed version
    flashinfer_dir: Path | None = None  # the installed ``flashinfer`` package
    linked_from: Path | None = None  # where sglang was found, when that folder is a link to ``package_dir``

    @property
    def pcie_ipc_option(self) -> bool:
        """Whether this release has ``SGLANG_ENABLE_PCIE_IPC_ALLREDUCE`` (FlashInfer's PCIe-IPC
        allreduce, sglang#34528, 0.5.23+): the module that implements it is there."""
        return (self.package_dir / PCIE_IPC_MODULE).is_file()

    @cached_property
    def flashinfer_facts(self) -> flashinfer_kernel.FlashInfer:
        """The installed FlashInfer and whether its code builds the SM12x allreduce."""
        return flashinfer_kernel.inspect(self.flashinfer, self.flashinfer_dir)

    def same_release(self, version: str | None) -> bool:
        """Whether ``version`` (a saved state's) names this tree's release.  A checkout's
        commits past a tag (``0.5.23+14.gdeadbee``) are the same release as the tag."""
        return release_of(version) == release_of(self.version)

    @property
    def parsed_version(self) -> Version | None:
        try:
            return Version(self.version) if self.version else None
        except InvalidVersion:
            return None

    def path(self, rel: str) -> Path:
        return self.package_dir / rel

    def exists(self, rel: str) -> bool:
        return self.path(rel).is_file()

    @cached_property
    def record(self) -> Record:
        """RECORD of the installed release (empty for a checkout or a bare directory)."""
        if self.dist_info is None:
            return Record("", None, "no install metadata (not installed from a wheel)")
        if self.install_kind is InstallKind.EDITABLE:
            return Record("", None, "an editable install: its RECORD does not list the checkout's files")
        path = self.dist_info / "RECORD"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            return Record("", None, f"cannot read {path} ({exc.strerror}): the pristine check is off")
        site = self.dist_info.parent
        for package, root in ((self.package_dir, site), (self.package_dir.resolve(), site.resolve())):
            if package.is_relative_to(root):
                prefix = package.relative_to(root).as_posix() + "/"
                if f"{prefix}__init__.py," in text:
                    return Record("\n" + text, prefix)
        return Record("", None, f"{path} lists no file of {self.package_dir}: the pristine check is off")


def release_of(version: str | None) -> str | None:
    """The public release of a version (its local label dropped)."""
    if version is None:
        return None
    try:
        return Version(version).public
    except InvalidVersion:
        return version


def install_kind(dist_info: Path | None, direct_url: object) -> InstallKind:
    """How sglang got there: ``direct_url`` is its ``direct_url.json`` (PEP 610), read or not
    (None); an editable install says ``"dir_info": {"editable": true}`` there."""
    dir_info = direct_url.get("dir_info") if isinstance(direct_url, dict) else None
    if isinstance(dir_info, dict) and dir_info.get("editable"):
        return InstallKind.EDITABLE
    return InstallKind.WHEEL if dist_info is not None else InstallKind.PATH


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


def interpreter(python: str) -> Path:
    """The executable ``--python`` names, made absolute against the caller's working
    directory (the probes run in a scratch one); a venv or conda env root stands for its
    python.  Not resolved: a venv's python is a link whose target is not the venv."""
    exe = Path(os.path.abspath(python))
    if exe.is_dir():
        for candidate in (exe / "bin" / "python", exe / "Scripts" / "python.exe"):
            if candidate.exists():
                return candidate
    return exe


def run_probe(python: str, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """Run the stdlib probe in another interpreter and return what it found."""
    exe = interpreter(python)
    if not exe.exists():
        raise EnvironmentProblem(f"--python {python}: no such interpreter")
    from sm120patch.probes import find_sglang

    try:
        answer = run_script(str(exe), find_sglang.__file__, step="look for sglang", timeout=timeout)
    except ProbeError as exc:
        raise EnvironmentProblem(f"--python {python}: {exc}") from exc
    if answer.returncode != 0:
        raise EnvironmentProblem(f"--python {python}: {exe} could not look for sglang: {answer.last_line()}")
    data = _understood(answer.stdout)
    if data is None:
        lines = [line.strip() for line in answer.stdout.splitlines() if line.strip()]
        first = lines[0][:200] if lines else "(nothing on stdout)"
        raise EnvironmentProblem(
            f"--python {python}: the answer of {exe} was not understood (not find_sglang's JSON); "
            f"its first line: {first}"
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


_VERSION_ASSIGN = re.compile(r"""^(?:__version__|version)\s*=\s*(?:version\s*=\s*)?["']([^"']+)["']""", re.M)
_DESCRIBE = re.compile(r"^v?(\d+(?:\.\d+)+(?:\.post\d+)?)(?:-(\d+)-g([0-9a-f]+))?$")


def checkout_version(package_dir: Path) -> str | None:
    """The version of an sglang without install metadata (a checkout): the file
    setuptools-scm writes (``_version.py``), a literal in ``version.py`` or the checkout's
    ``pyproject.toml``, else ``git describe`` of the checkout (read-only; commits after the
    tag become a local label: ``0.5.23+14.gdeadbee``)."""
    for source in (package_dir / "_version.py", package_dir / "version.py", package_dir.parent / "pyproject.toml"):
        try:
            match = _VERSION_ASSIGN.search(source.read_text(encoding="utf-8"))
        except OSError:
            continue
        if match:
            return match.group(1)
    try:
        proc = subprocess.run(
            ["git", "-C", str(package_dir), "describe", "--tags", "--match", "v[0-9]*"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _DESCRIBE.match(proc.stdout.strip()) if proc.returncode == 0 else None
    if match is None:
        return None
    release, commits, sha = match.groups()
    return f"{release}+{commits}.g{sha}" if commits and commits != "0" else release


def _metadata_field(metadata: Path, name: str) -> str | None:
    """A field of a dist-info's METADATA; None where there is none.  A METADATA that is there
    but cannot be read is exit 2: read as "no version", it would judge the tree wrongly."""
    try:
        with metadata.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                if key.strip().lower() == name:
                    return value.strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise EnvironmentProblem(f"{metadata}: cannot read the install metadata ({exc.strerror or exc})") from exc
    return None


def _listing(site: Path, pattern: str) -> list[Path]:
    """The entries of ``site`` named like ``pattern``.  ``Path.glob`` would take a folder it
    cannot list for an empty one, and sglang for a checkout without a version."""
    try:
        names = sorted(os.listdir(site))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise EnvironmentProblem(
            f"{site}: cannot list the folder sglang is installed in ({exc.strerror or exc})"
        ) from exc
    return [site / name for name in names if fnmatch.fnmatchcase(name, pattern)]


def _sibling_dist_info(package_dir: Path) -> Path | None:
    matches = []
    for candidate in _listing(package_dir.parent, "sglang-*.dist-info"):
        name = _metadata_field(candidate / "METADATA", "name")
        if name and name.lower() == "sglang":  # "sglang" has no separator to normalize
            matches.append(candidate)
    return max(matches, key=lambda p: p.stat().st_mtime) if matches else None


def _direct_url(dist_info: Path | None) -> object:
    """The install's ``direct_url.json``, or None when there is none or it does not parse."""
    if dist_info is None:
        return None
    path = dist_info / "direct_url.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    except OSError as exc:  # there, unreadable: an editable install would be taken for a wheel
        raise EnvironmentProblem(f"{path}: cannot read the install metadata ({exc.strerror or exc})") from exc


def from_directory(directory: Path) -> SglangTree:
    """``--sglang-path``: the ``sglang`` package dir, or a dir that contains it."""
    if not directory.is_dir():
        raise EnvironmentProblem(f"--sglang-path {directory}: not a directory")
    candidates = [directory, directory / "sglang"]
    package_dir = next(
        (c for c in candidates if c.name == "sglang" and (c / "__init__.py").is_file() and (c / "srt").is_dir()),
        None,
    )
    if package_dir is None:
        emptied = next((c for c in candidates if c.name == "sglang" and (c / DIRNAME).is_dir()), None)
        if emptied is not None and not (emptied / "__init__.py").exists():  # what pip uninstall left
            raise EnvironmentProblem(_no_code(emptied, f"--sglang-path {directory}"))
        inner = (directory / "__init__.py").is_file()
        raise EnvironmentProblem(
            f"--sglang-path {directory}: not an sglang package"
            + (f" (it is the package '{directory.name}')" if inner else "")
            + "; pass the 'sglang' directory that holds srt/ (site-packages/sglang, "
            "or a checkout's python/sglang) or the directory above it"
        )
    linked_from = Path(os.path.abspath(package_dir)) if package_dir.is_symlink() else None
    package_dir = package_dir.resolve()
    dist_info = _sibling_dist_info(package_dir)
    version = _metadata_field(dist_info / "METADATA", "version") if dist_info else None
    if version is None:
        version = checkout_version(package_dir)
    return SglangTree(
        package_dir,
        version,
        install_kind(dist_info, _direct_url(dist_info)),
        dist_info,
        how_found=f"--sglang-path {directory}",
        flashinfer=_sibling_flashinfer(package_dir.parent),
        flashinfer_dir=flashinfer_kernel.sibling_package(package_dir.parent),
        linked_from=linked_from,
    )


def _sibling_flashinfer(site: Path) -> str | None:
    """FlashInfer's version when it is installed beside sglang (same site-packages)."""
    for pattern in ("flashinfer_python-*.dist-info", "flashinfer-*.dist-info"):
        for dist in _listing(site, pattern):
            version = _metadata_field(dist / "METADATA", "version")
            if version:
                return version
    return None


def locate(
    python: str | None = None, sglang_path: Path | None = None, timeout: float = DEFAULT_TIMEOUT_S
) -> SglangTree:
    """Find sglang without importing it; EnvironmentProblem (exit 2) says what was searched.
    ``timeout``: how long another interpreter (``python``) may take to answer."""
    if python and sglang_path:
        raise EnvironmentProblem("give either --python or --sglang-path, not both")
    if sglang_path is not None:
        return from_directory(sglang_path)
    if python:
        data = run_probe(python, timeout)
        how = f"--python {python}"
    else:
        from sm120patch.probes import find_sglang

        data = find_sglang.find()
        how = f"this interpreter ({sys.executable})"
    tree = _from_probe(data, how)
    if tree is None:
        paths = "\n  ".join(data.get("sys_path") or ["(empty)"])
        raise EnvironmentProblem(
            f"no sglang found in {how}.\nSearched sys.path:\n  {paths}\n"
            "Pass --python /path/to/the/serving/env/bin/python (e.g. when sm120patch runs "
            "from pipx), or --sglang-path DIR (the sglang package directory), or run "
            "`sm120patch demo` to try it on a downloaded release."
        )
    if not os.access(tree.package_dir, os.R_OK):
        raise EnvironmentProblem(f"{tree.package_dir}: not readable")
    if not (tree.package_dir / "__init__.py").is_file():
        raise EnvironmentProblem(_no_code(tree.package_dir, how))
    return tree


def _no_code(package_dir: Path, how: str) -> str:
    """Why an ``sglang`` folder without ``__init__.py`` is no sglang.  Where only sm120patch's
    state is left, pip uninstalled sglang around it (Python imports that as an empty namespace);
    anything else (a checkout's root, say) is left alone."""
    left = sorted(p.name for p in package_dir.iterdir())
    if set(left) <= {DIRNAME}:
        what = f"no sglang code, only sm120patch's state folder {DIRNAME}" if left else "nothing"
        return (
            f"no sglang found in {how}: {package_dir} holds {what}; sglang was uninstalled. "
            f"Remove {package_dir} once you have kept what you need from it"
        )
    return f"no sglang found in {how}: {package_dir} holds no sglang code (no __init__.py)"
