"""registry.select: --only pulls in what the chosen patches need, --skip refuses to break it."""

from __future__ import annotations

import pytest

from sm120patch.plan.registry import SelectionError, all_patches, select

IMPORT, FLAG, GATE = "communicator-import", "communicator-flag", "communicator-fusion-gate"
INDEPENDENT = ("fusion-backend-resolver", "server-args-auto-enable", "workspace-preflight")


def ids(only: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> list[str]:
    return [p.id for p in select(only, skip)[0]]


def test_the_chain_this_test_relies_on() -> None:
    requires = {p.id: p.requires for p in all_patches()}
    assert requires[GATE] == (FLAG,) and requires[FLAG] == (IMPORT,) and requires[IMPORT] == ()
    assert all(requires[pid] == () for pid in INDEPENDENT)


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
)
def test_impossible_selections_are_refused_with_a_reason(only: tuple, skip: tuple, message: str) -> None:
    with pytest.raises(SelectionError) as info:
        select(only, skip)
    assert message in str(info.value)
