"""Which name a write replaces, when sglang's files are links into a store it does not own.

Installers share files between environments: uv's ``--link-mode=symlink`` makes every file of
``site-packages/sglang`` a symlink into uv's cache, its default on Linux (and conda's package
cache) hard-links them.  Writing through such a link would patch the cache, and with it every
environment that shares it, with no saved state there.  So each target is classified once:

* a regular file is replaced by name (``os.replace``): a hard link to a cache is broken, the
  cache keeps its bytes (``shared``, so the report can say so);
* a symlink whose real file lies inside the package (a link from one sglang file to another)
  is followed: the real file, which is the package's own, is replaced;
* a symlink out of the package is replaced by a regular file *here*; the link's text
  (``os.readlink``) is kept, and ``revert`` puts the same link back;
* a file whose folder is a link out of the package cannot be written without writing into
  that folder: refused, nothing is written.

A package directory that is itself a link (``site-packages/sglang`` -> a checkout) is located
as its real path, so its files are regular files of the checkout and are patched there.  A
link to a folder beside a ``*.dist-info`` is an installed wheel's files in a store, not a
checkout: refused too (commands/shared_files.py says why).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sm120patch.errors import EnvironmentProblem
from sm120patch.patcher.transaction.fsutil import sha256_file

#: How a symlink's state is named in the journal's and the manifest's "before"/"after": its
#: text, not the bytes it leads to (those belong to the store).
LINK_PREFIX = "link:"


@dataclass(frozen=True)
class Target:
    """Where a write to one package file goes."""

    path: Path  # the name that is replaced
    link: str | None = None  # a symlink out of the package: its text (``os.readlink``)
    store_file: Path | None = None  # and the file it leads to, which is never written
    shared: int = 0  # other hard links of the file (``st_nlink - 1``): a cache holds them


def inside(path: str | Path, folder: str | Path) -> bool:
    return Path(path).is_relative_to(folder)


def target(package_dir: Path, path: Path) -> Target:
    """Classify ``path`` (a file under ``package_dir``) for writing; EnvironmentProblem when
    its folder is a link out of the package."""
    package = os.path.realpath(package_dir)
    folder = os.path.realpath(path.parent)
    if not inside(folder, package):
        raise EnvironmentProblem(
            f"{path}: its folder is a link to {folder}, outside the sglang package {package}; sm120patch "
            "writes only this environment's own files, never into a folder it links to. Nothing was "
            "written. Install sglang with copied files (uv: --link-mode=copy) to patch it",
            code="shared-store",
        )
    here = Path(folder) / path.name
    if here.is_symlink():
        real = os.path.realpath(here)
        if inside(real, package):
            return target(package_dir, Path(real)) if Path(real) != here else Target(here)
        return Target(here, link=os.readlink(here), store_file=Path(real))
    try:
        links = os.stat(here).st_nlink
    except FileNotFoundError:
        links = 1
    return Target(here, shared=max(links - 1, 0))


def identity(path: Path) -> str | None:
    """What a name holds, as the journal compares it: a symlink's text (``link:<text>``),
    else the sha256 of the file's bytes; None when there is nothing."""
    if path.is_symlink():
        return LINK_PREFIX + os.readlink(path)
    try:
        return sha256_file(path)
    except IsADirectoryError:
        if path.is_dir():  # a folder where the file was: no file there
            return None
        raise  # the file could not be read: an I/O error, not "nothing there"


def leads_to(path: Path, text: str, digest: str) -> bool:
    """Whether a symlink at ``path`` with ``text`` would lead to a file of sha256 ``digest``."""
    try:
        return sha256_file(path.parent / text) == digest
    except OSError:
        return False
