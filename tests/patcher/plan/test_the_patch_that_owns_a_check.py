"""Which pending patch owns an SM check the sweep finds (plan/gate_sweep.verdicts): the one whose
evidence line the check holds, inside the function the patch is anchored at.  An owned check is
not reported (the patch will widen it); any other check beside it still is."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from sm120patch.patcher.kit.model import Anchor, Kind, Releases, State
from sm120patch.patcher.plan import gate_sweep
from sm120patch.patcher.plan.registry import by_id
from sm120patch.patcher.plan.types import Evidence, FilePlan, PatchReport, Plan
from sm120patch.sglang.tree import InstallKind, SglangTree

TREE = SglangTree(Path("/site/sglang"), "0.5.23", InstallKind.WHEEL, None, "a test")
COMM = "srt/layers/flashinfer_comm_fusion.py"
RESOLVER = "fusion-backend-resolver"  # anchored at _resolve_backend in COMM

# Line 2 is the gate the resolver patch widens (its evidence); line 4 is a second gate beside it;
# line 8 sits in a function defined inside the anchor, which is not the anchor.
RESOLVER_SOURCE = textwrap.dedent(
    """\
    def _resolve_backend(backend):
        if not get_platform().is_sm100:
            raise ValueError("only SM100 from now on")
        if not is_sm90_supported():
            raise ValueError("and SM90 before it")

        def pick():
            return is_sm100_supported()

        return pick()
    """
).encode()


def report(ident: str, rel: str, state: State, *lines: int) -> PatchReport:
    return PatchReport(ident, "", (), rel, state, "", evidence=[Evidence(line, "") for line in lines])


def owners(files: dict[str, bytes], reports: list[PatchReport]) -> list[tuple[int, str | None, bool]]:
    """Each check on the path: its line, the patch that owns it, and whether it is reported."""
    plan = Plan(TREE, [FilePlan(r.file, TREE.path(r.file), files.get(r.file), reports=[r]) for r in reports])
    found, unread = gate_sweep.verdicts(files, plan)
    assert unread == []
    return [(v.check.line, v.owner, v.reported) for v in found]


def test_a_pending_patch_owns_only_the_check_that_holds_its_evidence_in_its_anchor() -> None:
    # Another file's report comes first: the patch of this file is still found after it.
    elsewhere = report("communicator-fusion-gate", "srt/layers/communicator.py", State.PENDING, 2)
    resolver = report(RESOLVER, COMM, State.PENDING, 2, 8)
    assert owners({COMM: RESOLVER_SOURCE}, [elsewhere, resolver]) == [
        (2, RESOLVER, False),
        (4, None, True),  # in the anchor, but not the patch's evidence: a new gate
        (8, None, True),  # the evidence line, but in pick(), which the patch does not change
    ]


@pytest.mark.parametrize(
    "owner",
    [
        report(RESOLVER, COMM, State.DRIFT, 2),
        report(RESOLVER, "srt/layers/layer_boundary/fusions/allreduce.py", State.PENDING, 2),
        report("a-patch-this-sm120patch-lacks", COMM, State.PENDING, 2),
    ],
    ids=["drift: apply will not change it", "a report of another file", "a patch this tool lacks"],
)
def test_a_report_that_will_not_widen_the_check_owns_nothing(owner: PatchReport) -> None:
    assert owners({COMM: RESOLVER_SOURCE}, [owner])[0] == (2, None, True)


def test_a_patch_anchored_at_a_method_owns_the_method_not_a_function_of_its_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No patch is anchored at a method on the fused path yet; a fake one (the resolver patch
    anchored at ``FusedAllReduce.forward``) stands in for the first that will be."""
    rel = "srt/layers/layer_boundary/fusions/allreduce.py"
    fake = type(by_id()[RESOLVER])
    monkeypatch.setattr(
        fake, "anchors", (Anchor(rel, "forward", Releases("0.5.21"), cls="FusedAllReduce", kind=Kind.FUNCTION),)
    )
    source = textwrap.dedent(
        """\
        def forward(x):
            if not is_sm100_supported():
                return x


        class FusedAllReduce:
            def forward(self, x):
                if not is_sm100_supported():
                    return x
        """
    ).encode()
    assert owners({rel: source}, [report(RESOLVER, rel, State.PENDING, 2, 8)]) == [
        (2, None, True),  # a module function named like the method
        (8, RESOLVER, False),
    ]


def test_a_patch_left_out_as_asked_owns_its_clause_and_only_it() -> None:
    """Skipped by the last apply (verify's plan) or left out by this one (``Plan.left_out``):
    its clause is its own, a second gate beside it is still reported."""
    skipped = report(RESOLVER, COMM, State.SKIPPED, 2)
    assert owners({COMM: RESOLVER_SOURCE}, [skipped]) == [(2, RESOLVER, False), (4, None, True), (8, None, True)]
    plan = Plan(TREE, [], left_out=[report(RESOLVER, COMM, State.SKIPPED, 2)])
    found, _ = gate_sweep.verdicts({COMM: RESOLVER_SOURCE}, plan)
    assert [(v.check.line, v.owner) for v in found] == [(2, RESOLVER), (4, None), (8, None)]
    # Left out but applied already (or not needed): it widens nothing, the check is not its.
    applied = Plan(TREE, [], left_out=[report(RESOLVER, COMM, State.APPLIED, 2)])
    assert gate_sweep.verdicts({COMM: RESOLVER_SOURCE}, applied)[0][0].owner is None
