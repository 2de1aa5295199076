"""Environments that share their sglang files with a store, as installers make them.

``linked_site(store, site, mode)`` lays out the miniature (or a real) release found in
``store`` into ``site`` the way uv does with ``--link-mode=symlink`` (real folders, every
file a symlink to the store's file, the dist-info's RECORD a file of its own) or
``hardlink`` (uv's default on Linux, conda's package cache: every file a hard link).
``store_digest`` hashes everything under a folder, links by their text, so a test can prove
that nothing in the store changed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path


def linked_site(store: Path, site: Path, mode: str = "symlink") -> Path:
    """``store``'s sglang and dist-info laid out in ``site``; returns ``site/sglang``."""
    for top in [store / "sglang", *store.glob("sglang-*.dist-info")]:
        for path in sorted(top.rglob("*")):
            if path.is_dir():
                continue
            dest = site / path.relative_to(store)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if path.name == "RECORD":
                shutil.copyfile(path, dest)
            elif mode == "symlink":
                dest.symlink_to(path)
            elif mode == "hardlink":
                os.link(path, dest)
            else:
                raise ValueError(mode)
    return site / "sglang"


def store_digest(root: Path) -> str:
    """One sha256 over every name under ``root``: a file's bytes, a link's text."""
    digest = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]):
            path = os.path.join(folder, name)
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            if os.path.islink(path):
                digest.update(b"link:" + os.readlink(path).encode())
            else:
                with open(path, "rb") as fh:
                    digest.update(fh.read())
            digest.update(b"\0")
    return digest.hexdigest()


def links_of(package: Path, rels: list[str]) -> dict[str, str | None]:
    """Each file's link text, None where it is a file of its own."""
    return {rel: os.readlink(package / rel) if (package / rel).is_symlink() else None for rel in rels}
