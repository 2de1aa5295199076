"""Locate the sglang to patch: this interpreter, another one (``--python``) or a directory."""

from __future__ import annotations

import base64
import csv
import fnmatch
import json
import os
import re
import subprocess
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from pathlib import Path

from packaging.version import InvalidVersion, Version

from sm120patch.errors import EnvironmentProblem
from sm120patch.sglang import flashinfer as flashinfer_kernel


class InstallKind(str, Enum):
    WHEEL = "wheel"  # pip-installed release: RECORD says what the pristine files are
    EDITABLE = "editable"  # pip install -e of a checkout: edits the user's checkout
    PATH = "path"  # a directory given by --sglang-path without install metadata


DIRNAME = ".sm120patch"  # sm120patch's state folder inside the package it patched


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


def interpreter(python: str) -> Path:
    """The executable ``--python`` names, made absolute against the caller's working
    directory (the probes run in a scratch one); a venv or conda env root stands for its
    python (a broken link too: the caller names it).  Not resolved: a venv's python is a link
    whose target is not the venv."""
    exe = Path(os.path.abspath(python))
    if exe.is_dir():
        for candidate in (exe / "bin" / "python", exe / "Scripts" / "python.exe"):
            if candidate.exists() or candidate.is_symlink():
                return candidate
    return exe


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
        raise EnvironmentProblem(
            f"{metadata}: cannot read the install metadata ({exc.strerror or exc})", code="unreadable"
        ) from exc
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
            f"{site}: cannot list the folder sglang is installed in ({exc.strerror or exc})", code="unreadable"
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
        raise EnvironmentProblem(
            f"{path}: cannot read the install metadata ({exc.strerror or exc})", code="unreadable"
        ) from exc


def from_directory(directory: Path) -> SglangTree:
    """``--sglang-path``: the ``sglang`` package dir, or a dir that contains it."""
    if not directory.is_dir():
        raise EnvironmentProblem(f"--sglang-path {directory}: not a directory", code="no-sglang")
    candidates = [directory, directory / "sglang"]
    package_dir = next(
        (c for c in candidates if c.name == "sglang" and (c / "__init__.py").is_file() and (c / "srt").is_dir()),
        None,
    )
    if package_dir is None:
        emptied = next((c for c in candidates if c.name == "sglang" and (c / DIRNAME).is_dir()), None)
        if emptied is not None and not (emptied / "__init__.py").exists():  # what pip uninstall left
            raise EnvironmentProblem(no_code_found(emptied, f"--sglang-path {directory}"), code="no-sglang")
        inner = (directory / "__init__.py").is_file()
        raise EnvironmentProblem(
            f"--sglang-path {directory}: not an sglang package"
            + (f" (it is the package '{directory.name}')" if inner else "")
            + "; pass the 'sglang' directory that holds srt/ (site-packages/sglang, "
            "or a checkout's python/sglang) or the directory above it",
            code="no-sglang",
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


def no_code_found(package_dir: Path, how: str) -> str:
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
