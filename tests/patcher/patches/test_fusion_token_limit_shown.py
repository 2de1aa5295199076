"""How the fusion token limit's sites are shown (patches/fusion_token_limit.shown): a constant
the rows look for (the rows a role find made, where it made them) with its value, a literal
by where it stands."""

from __future__ import annotations

import libcst as cst

from sm120patch.patcher.kit.model import FOUND_BY_ROLE, Anchor, Kind, Releases
from sm120patch.patcher.patches.fusion_token_limit import LIMIT_NAME, Site, shown

MOVED = "srt/layers/fusion_gates.py"


def site(where: str, value: int) -> Site:
    node = cst.Integer(str(value))
    return Site(node, where, node, value)


def test_a_constant_a_role_find_named_is_shown_with_its_value() -> None:
    rows = (Anchor(MOVED, "AR_FUSION_MAX_TOKENS", Releases("0"), kind=Kind.ASSIGNMENT, found_by=FOUND_BY_ROLE),)
    assert shown([site("AR_FUSION_MAX_TOKENS", 4096)], rows) == "AR_FUSION_MAX_TOKENS = 4096"


def test_without_rows_the_known_constant_is_shown_with_its_value() -> None:
    assert shown([site(LIMIT_NAME, 2048)]) == f"{LIMIT_NAME} = 2048"
