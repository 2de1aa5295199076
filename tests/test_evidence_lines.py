"""On real releases (every file, every patch, before and after apply): the evidence lines equal
libcst's PositionProvider lines and the file's own lines, and regenerating only what changed
gives exactly the bytes printing the whole module gives."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from sm120patch.commands.apply import apply as apply_tree
from sm120patch.locate.tree import from_directory
from sm120patch.patchkit import static_names
from sm120patch.patchkit.model import PatchContext
from sm120patch.plan.evidence import _lines_by_statement, emit, generate
from sm120patch.plan.registry import all_patches, provided_for

pytestmark = pytest.mark.slow  # real sglang releases from the package index


@pytest.mark.parametrize("version", ["0.5.9", "0.5.14", "0.5.23"])
def test_lines_match_position_provider(release, version: str) -> None:
    package = release(version)
    tree = from_directory(package)
    for stage in ("pristine", "patched"):
        if stage == "patched":
            assert apply_tree(tree, list(all_patches())).exit_code == 0
        base = PatchContext(tree.parsed_version, partial(static_names.defines, tree.package_dir))
        by_file: dict[str, list] = {}
        for patch in all_patches():
            by_file.setdefault(patch.target(tree.exists), []).append(patch)
        for rel, patches in by_file.items():
            data = tree.path(rel).read_bytes()
            module = cst.parse_module(data)
            groups = [p.check(module, replace(base, provided=provided_for(p))).evidence for p in patches]
            code, found = generate(module, groups)
            assert code.encode(module.encoding) == data
            assert emit(data, module, module, groups) == (data, found)
            assert _lines_by_statement(module, code, groups) == found  # no fallback needed
            positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
            file_lines = data.decode().splitlines()
            for group, evidence in zip(groups, found, strict=True):
                expected = sorted({positions[node].start.line for node in group})
                assert [e.line for e in evidence] == expected, (stage, rel)
                assert all(file_lines[e.line - 1].rstrip() == e.text for e in evidence)


@pytest.mark.parametrize("version", ["0.5.9", "0.5.14", "0.5.23"])
def test_apply_splices_exactly_what_printing_gives(release, version: str, monkeypatch) -> None:
    from sm120patch.plan import evidence
    from sm120patch.plan.planner import make_plan

    printed: list[bytes] = []

    def whole_module(module, groups):  # the fallback: must not be needed on real releases
        raise AssertionError("fell back to printing the whole module")

    real_emit = evidence.emit

    def checked_emit(original, parsed, final, groups, scopes=()):
        data, lines = real_emit(original, parsed, final, groups, scopes)
        printed.append(final.bytes)
        assert data == final.bytes
        return data, lines

    monkeypatch.setattr(evidence, "generate", whole_module)
    monkeypatch.setattr("sm120patch.plan.planner.emit", checked_emit)
    plan = make_plan(from_directory(release(version)), list(all_patches()), change=True)
    assert [f.updated for f in plan.changes] == [p for p in printed if p in {f.updated for f in plan.changes}]
    assert plan.changes
