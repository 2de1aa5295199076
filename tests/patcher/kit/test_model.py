"""patchkit.model: the words a patch's states are written in, the release ranges its anchors
cover, and what a patch says about a tree where its file is missing.  ``Toy`` below is a
patch written for these tests only (its ``check`` is never run)."""

from __future__ import annotations

import libcst as cst
import pytest
from packaging.version import Version

from sm120patch.patcher.kit.model import (
    KNOWN_UP_TO,
    Anchor,
    Edit,
    Example,
    Finding,
    Kind,
    Patch,
    PatchContext,
    Releases,
    State,
    known_rows,
)
from sm120patch.patcher.plan.registry import by_id


def test_the_words_reports_and_saved_state_use() -> None:
    assert {s.name: s.value for s in State} == {
        "PENDING": "pending",
        "APPLIED": "applied",
        "NOT_NEEDED": "not-needed",
        "DRIFT": "drift",
        "REFUSED": "refused",
        "SKIPPED": "skipped",
    }
    assert {e.name: e.value for e in Edit} == {
        "IMPORT": "import",
        "FLAG": "flag",
        "OR_TERM": "or-term",
        "GUARD": "guard",
        "LIMIT": "limit",
    }
    assert {k.name: k.value for k in Kind} == {"FUNCTION": "function", "ASSIGNMENT": "assignment", "IMPORT": "import"}
    assert State("not-needed") is State.NOT_NEEDED and State.DRIFT == "drift"


@pytest.mark.parametrize(
    ("version", "inside"),
    [
        ("0.5.8", False),
        ("0.5.9rc1", False),  # a pre-release comes before its release
        ("0.5.9", True),
        ("0.5.10", True),  # compared as versions, not as text
        ("0.5.14", True),  # ``last`` is inclusive
        ("0.5.14.post1", False),
        ("0.5.15", False),
        ("not a version", False),
        (None, False),
        (Version("0.5.12"), True),
    ],
    ids=[
        "0.5.8",
        "0.5.9rc1",
        "0.5.9",
        "0.5.10",
        "0.5.14",
        "0.5.14.post1",
        "0.5.15",
        "not a version",
        "None",
        "Version 0.5.12",
    ],
)
def test_releases_contain_first_to_last_inclusive(version: object, inside: bool) -> None:
    assert (version in Releases("0.5.9", "0.5.14")) is inside


def test_releases_without_last_run_up_to_now() -> None:
    now = Releases("0.5.14")
    assert now.last is None
    assert "0.5.14" in now and "9.0" in now and "0.5.13" not in now


def test_releases_as_text() -> None:
    assert str(Releases("0.5.9", "0.5.9")) == "0.5.9"
    assert str(Releases("0.5.9", "0.5.14")) == "0.5.9 - 0.5.14"
    assert str(Releases("0.5.14")) == "0.5.14 - now"


def test_anchor_defaults_and_descriptions() -> None:
    anchor = Anchor("srt/layers/communicator.py", "apply", Releases("0.5.9"))
    assert (anchor.cls, anchor.kind, anchor.expect, anchor.imports, anchor.note) == (
        None,
        Kind.FUNCTION,
        State.PENDING,
        False,
        "",
    )
    assert anchor.describe() == "function apply"
    method = Anchor("f.py", "apply", Releases("0.5.9"), cls="Communicator")
    assert method.describe() == "method Communicator.apply"
    flag = Anchor("f.py", "_is_sm100_supported", Releases("0.5.9"), kind=Kind.ASSIGNMENT)
    assert flag.describe() == "`_is_sm100_supported = ...`"
    imported = Anchor("f.py", "is_sm100_supported", Releases("0.5.9"), cls="Ignored", kind=Kind.IMPORT)
    assert imported.describe() == "`from sglang.srt.utils import is_sm100_supported`"


def test_patch_context_names_the_release() -> None:
    ctx = PatchContext(Version("0.5.9"), lambda module, name: True)
    assert ctx.release == "sglang 0.5.9" and ctx.provided == frozenset()
    assert PatchContext(None, lambda module, name: True).release == "this sglang"


def test_finding_defaults_and_repr_leave_out_the_rewrite() -> None:
    finding = Finding(State.APPLIED, "already there")
    assert (finding.where, tuple(finding.evidence), finding.apply, tuple(finding.scopes)) == ("", (), None, ())
    shown = repr(Finding(State.PENDING, "d", "f.py", apply=lambda m: m, scopes=(cst.Pass(),)))
    assert shown == "Finding(state=<State.PENDING: 'pending'>, detail='d', where='f.py', evidence=())"


def test_example_sources_are_dedented_from_their_first_line() -> None:
    example = Example(
        "gate",
        """
            if x:
                y = 1
        """,
        """
            z = 2
        """,
    )
    assert example.before == "if x:\n    y = 1\n"
    assert example.after == "z = 2\n"
    assert (example.state, example.detail, example.evidence, example.undefined) == (State.PENDING, None, None, ())


def test_an_example_gives_after_exactly_when_it_is_pending() -> None:
    with pytest.raises(ValueError, match=r"^example 'gate': give `after` exactly for a pending example$"):
        Example("gate", "x = 1\n")
    with pytest.raises(ValueError, match=r"^example 'done': give `after` exactly for a pending example$"):
        Example("done", "x = 1\n", "x = 2\n", state=State.APPLIED)
    applied = Example("done", "  x = 1\n", state=State.APPLIED)
    assert applied.after is None and applied.before == "x = 1\n"


def test_an_example_s_context_has_no_release_and_lacks_only_its_undefined_names() -> None:
    example = Example("old", "x = 1\n", state=State.DRIFT, undefined=("is_sm120_supported",))
    ctx = example.context(frozenset({"_is_sm120_supported"}))
    assert ctx.version is None and ctx.provided == frozenset({"_is_sm120_supported"})
    assert not ctx.defines("sglang.srt.utils", "is_sm120_supported")
    assert ctx.defines("sglang.srt.utils", "is_sm100_supported")
    assert example.context().provided == frozenset()


class Toy(Patch):
    """A toy patch.

    Looks in two files."""

    id = "toy"
    summary = "toy"
    edits = Edit.FLAG
    since = "0.5.10"
    anchors = (
        Anchor("new.py", "f", Releases("0.5.14")),
        Anchor("old.py", "f", Releases("0.5.10", "0.5.13")),
        Anchor("new.py", "g", Releases("0.5.12", "0.5.13")),
    )

    def check(self, module: cst.Module, ctx: PatchContext) -> Finding:
        raise NotImplementedError


class Bare(Toy):
    since = None


Bare.__doc__ = None


def test_a_patch_s_files_newest_first_once_each() -> None:
    toy = Toy()
    assert toy.files == ("new.py", "old.py")
    assert toy.target(lambda rel: rel == "old.py") == "old.py"
    assert toy.target(lambda rel: True) == "new.py"
    assert toy.target(lambda rel: False) == "new.py"  # none exists: the newest layout's
    assert (Toy.requires, Toy.provides, Toy.examples) == ((), (), ())


def test_the_anchor_that_covers_a_release_is_the_first_that_does() -> None:
    toy = Toy()
    assert toy.anchor_at("0.5.20") is Toy.anchors[0]
    assert toy.anchor_at("0.5.12") is Toy.anchors[1]
    assert toy.anchor_at("0.5.9") is None


@pytest.mark.parametrize(
    ("patch", "version", "state", "detail"),
    [
        (Toy(), "0.5.9", State.NOT_NEEDED, "nothing to change before sglang 0.5.10 (no old.py)"),
        (Toy(), "0.5.10", State.DRIFT, "none of new.py, old.py exists in sglang 0.5.10"),
        (Toy(), None, State.DRIFT, "none of new.py, old.py exists in this sglang"),
        (Bare(), "0.5.9", State.DRIFT, "none of new.py, old.py exists in sglang 0.5.9"),
    ],
    ids=["before since", "at since", "no release", "no since"],
)
def test_a_missing_file_is_not_needed_only_before_the_release_that_added_it(
    patch: Patch, version: str | None, state: State, detail: str
) -> None:
    ctx = PatchContext(Version(version) if version else None, lambda module, name: True)
    finding = patch.absent(ctx, "old.py")
    assert (finding.state, finding.detail, finding.where) == (state, detail, "")


def test_a_patch_s_doc_is_its_docstring_stripped() -> None:
    assert Toy().doc == "A toy patch.\n\n    Looks in two files."
    assert Bare().doc == ""


def test_an_example_keeps_its_first_line_as_written_after_the_blank_lines() -> None:
    """Only the newlines before the code go: the first line's own text and indentation stay
    (an example may start with a name in capitals, or deeper than the lines after it)."""
    from sm120patch.patcher.kit.model import Example, State

    example = Example("caps", "\n\n    XX_FLAG = 1\n    y = 2\n", state=State.NOT_NEEDED)
    assert example.before == "XX_FLAG = 1\ny = 2\n"
    deeper = Example("deeper", "\n        x = 1\n    y = 2\n", state=State.NOT_NEEDED)
    assert deeper.before == "    x = 1\ny = 2\n"


def test_a_row_first_seen_in_the_release_known_up_to_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    """``SM120PATCH_KNOWN_UP_TO=0.5.21``: the gate row first seen in 0.5.21 is known, the one
    first seen in 0.5.22 is not yet."""
    anchors = by_id()["communicator-fusion-gate"].anchors
    assert {a.seen.first for a in anchors} == {"0.5.4", "0.5.8", "0.5.21", "0.5.22"}
    monkeypatch.setenv(KNOWN_UP_TO, "0.5.21")
    assert {a.seen.first for a in known_rows(anchors)} == {"0.5.4", "0.5.8", "0.5.21"}
