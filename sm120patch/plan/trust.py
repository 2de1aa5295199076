"""Trust by hash: patch states taken from the manifest instead of parsing, when that is safe.

``apply`` records, once it has written the tree, every file's sha256 and every patch's
report in it (``Manifest.checked``).  ``verify``, ``list`` and a no-op ``apply`` use those
reports instead of parsing, and never load libcst, only when all of this holds:

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

from sm120patch.locate.tree import SglangTree
from sm120patch.patchkit.model import State
from sm120patch.plan.fingerprint import code_fingerprint
from sm120patch.plan.types import Evidence, FilePlan, PatchReport, Plan
from sm120patch.transaction.fsutil import sha256
from sm120patch.transaction.state import CheckedFile, Manifest, StateDir


def _seal(manifest: Manifest) -> str:
    fields = {
        "fingerprint": manifest.fingerprint,
        "sglang_version": manifest.sglang_version,
        "patch_set": manifest.patch_set,
        "registry": manifest.registry,
        "checked": {rel: [c.sha256, c.reports] for rel, c in sorted(manifest.checked.items())},
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
        if final is None:
            continue
        manifest.checked[f.rel] = CheckedFile(
            sha256(final),
            [
                {
                    "id": r.id,
                    "summary": r.summary,
                    "requires": list(r.requires),
                    "state": (r.state_after or r.state).value,
                    "detail": r.detail,
                    "where": r.where,
                    "evidence": [[e.line, e.text] for e in r.evidence],
                }
                for r in f.reports
            ],
        )
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
    for rel, checked in sorted(manifest.checked.items()):
        path = tree.path(rel)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        if sha256(data) != checked.sha256:
            return None
        reports = [
            PatchReport(
                r["id"],
                r["summary"],
                tuple(r["requires"]),
                rel,
                State(r["state"]),
                r["detail"],
                r["where"],
                [Evidence(line, text) for line, text in r["evidence"]],
                State(r["state"]),
            )
            for r in checked.reports
        ]
        files.append(FilePlan(rel, path, data, reports=reports))
    return Plan(tree, files)
