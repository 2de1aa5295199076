"""Trust by hash: patch states taken from the manifest instead of parsing, when that is safe.

``apply`` records in the manifest it leaves behind (``Manifest.checked``, a ``CheckedFile``
per file) every file's sha256 and every patch's report as the written tree has them.
``verify``, ``list``, ``doctor`` and a no-op ``apply`` use those reports instead of parsing,
and never load libcst, only when all of this holds:

* the manifest was written by this very code (``fingerprint.code_fingerprint``: version,
  patch set and every line of sm120patch), for the sglang version installed now;
* that apply ran every patch sm120patch has (not an ``--only`` subset);
* no apply/revert is left interrupted;
* every recorded file's sha256 equals the hash recorded after writing;
* the record is sealed: an edit to the manifest (a hash, a state) that does not recompute
  the seal is caught.

Anything else (a hand edit, a reinstall, an upgrade, another tool version, a tampered
manifest) falls back to the full structural check.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sm120patch.patcher.plan.fingerprint import code_fingerprint
from sm120patch.patcher.plan.types import FilePlan, PatchReport, Plan
from sm120patch.patcher.transaction.fsutil import sha256
from sm120patch.patcher.transaction.state_dir import Manifest, StateDir
from sm120patch.sglang.tree import SglangTree


@dataclass
class CheckedFile:
    """What the last apply saw in a file once the tree was written: its sha256 and every
    patch's report.  ``trusted_plan`` believes these only for byte-identical files."""

    sha256: str
    reports: list[PatchReport]

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "reports": [r.to_json() for r in self.reports]}

    @classmethod
    def from_json(cls, rel: str, data: Mapping[str, Any]) -> CheckedFile:
        """KeyError, TypeError or ValueError when ``data`` is not what ``to_json`` wrote."""
        return cls(data["sha256"], [PatchReport.from_json(rel, r) for r in data["reports"]])


def _seal(manifest: Manifest) -> str:
    fields = {
        "fingerprint": manifest.fingerprint,
        "sglang_version": manifest.sglang_version,
        "patch_set": manifest.patch_set,
        "registry": manifest.registry,
        "checked": manifest.checked,
        "token_limit": manifest.token_limit,
        "auto_enable_tp": manifest.auto_enable_tp,
    }
    return sha256(json.dumps(fields, sort_keys=True).encode())


def record(plan: Plan, manifest: Manifest, registry: list[str]) -> None:
    """Put what ``plan`` leaves in each file into ``manifest`` (before it is committed)."""
    manifest.fingerprint = code_fingerprint()
    manifest.patch_set = sorted({r.id for r in plan.reports})
    manifest.registry = sorted(registry)
    manifest.checked = {}
    for f in plan.files:
        final = f.updated if f.changed else f.original
        if final is not None:
            manifest.checked[f.rel] = CheckedFile(sha256(final), f.reports).to_json()
    manifest.seal = _seal(manifest)


def trusted_plan(tree: SglangTree, state: StateDir, manifest: Manifest | None) -> Plan | None:
    """The plan of an already-applied tree read from ``manifest``, or None when any file
    (or anything else) has to be checked by structure."""
    if (
        manifest is None
        or not manifest.checked
        or manifest.fingerprint != code_fingerprint()
        or not tree.same_release(manifest.sglang_version)
        or sorted(manifest.patch_set) != sorted(manifest.registry)
        or state.journal_path.exists()
        or manifest.seal != _seal(manifest)
    ):
        return None
    files = []
    for rel, data in sorted(manifest.checked.items()):
        try:
            checked = CheckedFile.from_json(rel, data)
        except (KeyError, TypeError, ValueError):  # sealed, yet not a record this code writes
            return None
        path = tree.path(rel)
        try:
            content = path.read_bytes()
        except OSError:
            return None
        if sha256(content) != checked.sha256:
            return None
        files.append(FilePlan(rel, path, content, reports=checked.reports))
    return Plan(tree, files)
