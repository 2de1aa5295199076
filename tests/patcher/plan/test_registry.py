"""The registry: every patch module found once, requirements first, none unknown; and
``select``: --only pulls in what the chosen patches need, --skip refuses to break it."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sm120patch.patcher import patches as patch_package
from sm120patch.patcher.plan.registry import SelectionError, all_patches, select

PATCHER_TESTS = Path(__file__).resolve().parents[1]  # tests/patcher

IMPORT, FLAG, GATE = "communicator-import", "communicator-flag", "communicator-fusion-gate"
INDEPENDENT = ("fusion-backend-resolver", "fusion-token-limit", "server-args-auto-enable", "workspace-preflight")


def ids(only: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> list[str]:
    return [p.id for p in select(only, skip)[0]]


def test_the_chain_this_test_relies_on() -> None:
    requires = {p.id: p.requires for p in all_patches()}
    assert requires[GATE] == (FLAG,) and requires[FLAG] == (IMPORT,) and requires[IMPORT] == ()
    assert all(requires[pid] == () for pid in INDEPENDENT)


def test_all_patches_lists_each_requirement_before_its_dependants() -> None:
    seen: set[str] = set()
    for patch in all_patches():
        assert set(patch.requires) <= seen, patch.id
        seen.add(patch.id)


def test_every_patch_has_its_test_file() -> None:
    """tests/patcher/patches/test_<module>.py holds what is particular to each patch (what every patch
    meets: tests/patcher/patches/test_contract.py)."""
    for patch in all_patches():
        module = type(patch).__module__.rsplit(".", 1)[1]
        assert (PATCHER_TESTS / "patches" / f"test_{module}.py").is_file(), patch.id


FAKE_PATCH = """
from sm120patch.patcher.kit.model import Finding, Patch, State


class Fake(Patch):
    id = {id!r}
    summary = "a patch of the registry tests"
    anchors = ()
    requires = {requires!r}

    def check(self, module, ctx):
        return Finding(State.NOT_NEEDED, "")
"""


@pytest.fixture
def registry_of(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """``registry_of(name=(id, requires), ...)``: the registry reads only these patch modules."""
    names: list[str] = []

    def write(**modules: tuple[str, tuple[str, ...]]) -> None:
        for name, (pid, requires) in modules.items():
            source = FAKE_PATCH.format(id=pid, requires=requires)
            (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
            names.append(f"{patch_package.__name__}.{name}")

    monkeypatch.setattr(patch_package, "__path__", [str(tmp_path)])
    all_patches.cache_clear()
    yield write
    monkeypatch.undo()
    all_patches.cache_clear()
    for name in names:
        sys.modules.pop(name, None)


def test_a_patch_that_requires_an_unknown_patch_is_refused(registry_of: Callable[..., None]) -> None:
    registry_of(needy=("needy", ("ghost",)), known=("known", ()))
    with pytest.raises(RuntimeError, match="needy requires unknown patch 'ghost'"):
        all_patches()


def test_two_patches_with_one_id_are_refused(registry_of: Callable[..., None]) -> None:
    registry_of(first=("twin", ()), second=("twin", ()))
    with pytest.raises(RuntimeError, match="two patches share the id 'twin'"):
        all_patches()


def test_the_fake_registry_reads_its_modules_dependencies_first(registry_of: Callable[..., None]) -> None:
    registry_of(a_needy=("needy", ("known",)), z_known=("known", ()))
    assert [p.id for p in all_patches()] == ["known", "needy"]


def test_no_option_selects_every_patch_dependencies_first_without_notes() -> None:
    patches, notes = select()
    assert [p.id for p in patches] == [p.id for p in all_patches()]
    assert notes == []
    order = [p.id for p in patches]
    assert order.index(IMPORT) < order.index(FLAG) < order.index(GATE)


def test_only_pulls_in_what_is_required_transitively_and_says_so() -> None:
    patches, notes = select(only=[GATE])
    assert [p.id for p in patches] == [IMPORT, FLAG, GATE]
    assert sorted(notes) == [
        f"also selecting {FLAG} (required by {GATE})",
        f"also selecting {IMPORT} (required by {FLAG})",
    ]
    assert select(only=[IMPORT])[1] == []  # it needs nothing
    assert ids(only=(IMPORT,)) == [IMPORT]


def test_skip_leaves_out_exactly_what_it_names() -> None:
    assert ids(skip=INDEPENDENT) == [IMPORT, FLAG, GATE]
    assert ids(skip=(GATE, FLAG, IMPORT)) == list(INDEPENDENT)
    assert ids(only=(GATE, "workspace-preflight"), skip=("workspace-preflight",)) == [IMPORT, FLAG, GATE]


@pytest.mark.parametrize(
    ("only", "skip", "message"),
    [
        ((), (IMPORT,), f"cannot skip {IMPORT}: {FLAG} needs it (skip that too)"),
        ((), (FLAG,), f"cannot skip {FLAG}: {GATE} needs it (skip that too)"),
        ((GATE,), (IMPORT,), f"cannot skip {IMPORT}: {FLAG} needs it"),
        (("no-such-patch",), (), "unknown patch id no-such-patch; known: communicator-import"),
        ((), ("nope",), "unknown patch id nope"),
        ((IMPORT,), (IMPORT,), "nothing left to do: every patch was skipped"),
    ],
    ids=["skip import", "skip flag", "only gate skip import", "unknown only", "unknown skip", "only and skip one"],
)
def test_impossible_selections_are_refused_with_a_reason(only: tuple, skip: tuple, message: str) -> None:
    with pytest.raises(SelectionError) as info:
        select(only, skip)
    assert message in str(info.value)


def test_skipping_what_two_patches_need_names_both(registry_of: Callable[..., None]) -> None:
    registry_of(base=("base", ()), one=("one", ("base",)), two=("two", ("base",)))
    with pytest.raises(SelectionError) as info:
        select(skip=("base",))
    assert str(info.value) == "cannot skip base: one, two need it (skip those too)"


def test_every_unknown_id_is_named_with_every_known_one(registry_of: Callable[..., None]) -> None:
    registry_of(a_mod=("alpha", ()), b_mod=("beta", ()))
    with pytest.raises(SelectionError) as info:
        select(only=("gamma",), skip=("delta",))
    assert str(info.value) == "unknown patch id gamma, delta; known: alpha, beta"


def test_a_patch_class_imported_into_another_module_is_registered_once(
    registry_of: Callable[..., None], tmp_path: Path
) -> None:
    """A patch module that imports another's class (to reuse it) does not register it again."""
    registry_of(a_base=("base", ()))
    (tmp_path / "b_user.py").write_text(f"from {patch_package.__name__}.a_base import Fake as Borrowed\n")
    try:
        assert [p.id for p in all_patches()] == ["base"]
    finally:
        sys.modules.pop(f"{patch_package.__name__}.b_user", None)


def test_an_abstract_patch_class_is_not_registered(registry_of: Callable[..., None], tmp_path: Path) -> None:
    """A shared base class that leaves ``check`` abstract is a helper, not a patch."""
    registry_of(a_real=("real", ()))
    (tmp_path / "b_base.py").write_text(
        "from sm120patch.patcher.kit.model import Patch\n\n\nclass Base(Patch):\n    id = 'base'\n"
    )
    try:
        assert [p.id for p in all_patches()] == ["real"]
    finally:
        sys.modules.pop(f"{patch_package.__name__}.b_base", None)


def test_the_order_is_by_id_where_nothing_requires_another(registry_of: Callable[..., None]) -> None:
    registry_of(m1=("zeta", ()), m2=("alpha", ()), m3=("mid", ("zeta",)))
    assert [p.id for p in all_patches()] == ["alpha", "zeta", "mid"]  # "mid" waits for what it requires


def test_provided_names_are_those_of_every_requirement_transitively() -> None:
    from sm120patch.patcher.plan.registry import by_id, provided_for

    patches = by_id()
    assert provided_for(patches[IMPORT]) == frozenset()
    assert provided_for(patches[FLAG]) == frozenset(patches[IMPORT].provides)
    assert provided_for(patches[GATE]) == frozenset(patches[IMPORT].provides) | frozenset(patches[FLAG].provides)
    assert patches[IMPORT].provides and patches[FLAG].provides


def test_skipping_every_selected_patch_is_refused_in_one_sentence() -> None:
    with pytest.raises(SelectionError) as info:
        select(only=(IMPORT,), skip=(IMPORT,))
    assert str(info.value) == "nothing left to do: every patch was skipped"
