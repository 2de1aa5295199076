"""plan.evidence: regenerating only what changed gives exactly what printing the whole module
gives, and the evidence lines are where the code is.

Fast: every patch's examples, and hand-made repeated lines.  Slow, on real releases (every
file, every patch, before and after apply): the evidence lines equal libcst's
PositionProvider lines and the file's own lines, and apply never falls back to printing.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from sm120patch.patcher.commands.apply import apply as apply_tree
from sm120patch.patcher.kit.model import PatchContext, State
from sm120patch.patcher.plan.evidence import _lines_by_statement, _NotUnique, _splice, emit, generate
from sm120patch.patcher.plan.registry import all_patches, provided_for
from sm120patch.sglang import static_names
from sm120patch.sglang.tree import from_directory
from tests.support.patch_checks import every_example


@pytest.mark.parametrize(("patch", "example"), every_example())
def test_splice_of_each_example_equals_printing_the_module(patch, example) -> None:
    ctx = example.context(provided_for(patch))
    original = example.before.encode()
    parsed = cst.parse_module(original)
    finding = patch.check(parsed, ctx)
    final = finding.apply(parsed) if finding.state is State.PENDING and finding.apply else parsed
    evidence = [patch.check(final, ctx).evidence]
    code, lines = generate(final, evidence)
    assert emit(original, parsed, final, evidence) == (code.encode(), lines)
    # and without falling back to printing the whole module, unless a line repeats
    # (the sed of the hand fix run twice), where a statement's text is not unique:
    try:
        text = _splice(example.before, parsed, final) if final is not parsed else example.before
        assert text == code
        assert _lines_by_statement(final, text, evidence) == lines
    except _NotUnique:
        assert len(set(code.splitlines())) < len(code.splitlines())


def _tabs(code: str) -> str:
    return "\n".join(line.replace("    ", "\t") for line in code.split("\n"))


@pytest.mark.parametrize("layout", [lambda c: c.replace("\n", "\r\n"), _tabs], ids=["crlf", "tabs"])
@pytest.mark.parametrize(("patch", "example"), every_example())
def test_lines_are_found_without_printing_in_a_file_of_other_newlines_or_indents(patch, example, layout) -> None:
    """A file with Windows newlines or tab indents: each statement printed alone is found in
    it as written (its lines counted without printing the whole module)."""
    text = layout(example.before)
    module = cst.parse_module(text)
    evidence = [patch.check(module, example.context(provided_for(patch))).evidence]
    _, lines = generate(module, evidence)
    try:
        assert _lines_by_statement(module, text, evidence) == lines
    except _NotUnique:
        assert len(set(text.splitlines())) < len(text.splitlines())  # a line repeats


def test_a_text_that_is_not_unique_falls_back_to_printing() -> None:
    source = "x = 1\nif a:\n    y = 2\nif b:\n    y = 2\n"
    parsed = cst.parse_module(source)
    first_if = parsed.body[1]
    final = parsed.with_changes(body=[parsed.body[0], first_if.with_changes(test=cst.Name("c")), parsed.body[2]])
    duplicate = final.body[2].body.body[0]  # `y = 2` appears twice: its line cannot be found by text
    data, (lines,) = emit(source.encode(), parsed, final, [[duplicate]])
    assert data == final.bytes
    assert [e.line for e in lines] == [5]


# --- real releases ------------------------------------------------------------------------


@pytest.mark.slow  # real sglang releases from the package index
@pytest.mark.parametrize("version", ["0.5.9", "0.5.14", "0.5.23"])
def test_lines_match_position_provider_on_real_releases(release, version: str) -> None:
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


@pytest.mark.slow  # real sglang releases from the package index
@pytest.mark.parametrize("version", ["0.5.9", "0.5.14", "0.5.23"])
def test_apply_splices_exactly_what_printing_gives_on_real_releases(release, version: str, monkeypatch) -> None:
    from sm120patch.patcher.plan import evidence
    from sm120patch.patcher.plan.planner import make_plan

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
    monkeypatch.setattr("sm120patch.patcher.plan.planner.emit", checked_emit)
    plan = make_plan(from_directory(release(version)), list(all_patches()), change=True)
    assert [f.updated for f in plan.changes] == [p for p in printed if p in {f.updated for f in plan.changes}]
    assert plan.changes
