"""The fusion token limit as the saved state records it (``LimitAsk``), what apply says when
it writes the recorded limit again, where sglang's own limit is read, and why a saved bench
result is refused as not this host's (``mismatch``), sentence by sentence."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan.token_limit import (
    GIVEN,
    MEASURED,
    PATCH_ID,
    LimitAsk,
    mismatch,
    rewritten,
    sglang_sites,
)
from sm120patch.patcher.plan.types import PatchReport
from sm120patch.sglang.tree import SglangTree, from_directory
from tests.cli.test_fuse_up_to import LIMITED
from tests.support.cli import jrun
from tests.support.mini_sglang import COMM, FILES, write_mini_sglang

MEASURED_ASK = LimitAsk(
    512,
    MEASURED,
    host="gpu7",
    tp=2,
    gpus=("NVIDIA RTX PRO 6000 Blackwell", "NVIDIA RTX PRO 6000 Blackwell"),
    date="2026-12-03",
    release="0.5.11",
    baseline="plain torch",
    indicative=True,
)


# --- LimitAsk: the manifest's record ---------------------------------------------------------


def test_a_measured_ask_reads_back_as_written_through_json() -> None:
    data = MEASURED_ASK.to_json()
    assert set(data) == {f.name for f in dataclasses.fields(LimitAsk)}
    assert json.loads(json.dumps(data)) == data  # JSON's own types: the GPUs a list
    assert LimitAsk.from_json(json.loads(json.dumps(data))) == MEASURED_ASK


def test_an_ask_recorded_with_only_its_limit_is_a_given_one() -> None:
    """What a manifest written before the ask had a source (or a baseline) holds."""
    ask = LimitAsk.from_json({"limit": 512})
    assert ask == LimitAsk(512, GIVEN)
    assert ask is not None and not ask.indicative
    assert ask.describe() == "limit 512, given as --fuse-up-to 512"


@pytest.mark.parametrize(
    ("limit", "read"),
    [(1, True), (0, False), (True, False), ("512", False), (None, False)],
    ids=["one-token", "zero", "a-boolean", "a-string", "null"],
)
def test_only_a_positive_whole_number_is_a_recorded_limit(limit: object, read: bool) -> None:
    """Anything else is not what apply wrote: the ask is then unknown (None)."""
    ask = LimitAsk.from_json({"limit": limit})
    assert (ask is not None) is read
    if ask is not None:
        assert ask.limit == limit


def test_a_measured_ask_says_where_when_and_against_what_and_that_stand_ins_are_indicative() -> None:
    assert MEASURED_ASK.describe() == (
        "limit 512, measured by bench on gpu7 at TP 2 on 2026-12-03 against plain torch (indicative only)"
    )
    sglangs = dataclasses.replace(MEASURED_ASK, baseline="sglang's unfused path", indicative=False)
    assert sglangs.describe() == (
        "limit 512, measured by bench on gpu7 at TP 2 on 2026-12-03 against sglang's unfused path"
    )


# --- apply's note when it writes the recorded limit again ---------------------------------------


def report(ident: str, state: State) -> PatchReport:
    return PatchReport(ident, "", (), COMM, state, "")


def test_the_recorded_limit_is_said_written_again_only_when_the_limit_patch_is_pending() -> None:
    ask = LimitAsk(512)
    assert rewritten([report("communicator-fusion-gate", State.APPLIED), report(PATCH_ID, State.PENDING)], ask) == [
        "fusion token limit written again as the last apply was asked (limit 512, given as --fuse-up-to 512); "
        "`sm120patch apply --fuse-up-to sglang` puts sglang's own back"
    ]
    # Another patch pending (a reinstall undid it) says nothing about the limit, still in place.
    assert rewritten([report("communicator-fusion-gate", State.PENDING), report(PATCH_ID, State.APPLIED)], ask) == []


# --- sglang's own limit -------------------------------------------------------------------------


def test_sglangs_own_sites_are_read_from_the_backup_once_the_limit_is_lowered(tmp_path: Path) -> None:
    package = write_mini_sglang(tmp_path / "site", files={**FILES, COMM: LIMITED})
    assert jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "512")[0] == 0
    tree = from_directory(package)
    shipped = sglang_sites(tree)
    assert shipped is not None and [site.value for site in shipped] == [2048]  # as sglang ships it
    in_force = sglang_sites(tree, shipped=False)
    assert in_force is not None and [site.value for site in in_force] == [512]


@pytest.mark.parametrize(
    "gate",
    [FILES[COMM], LIMITED.replace("= 2048", "= 1 << 11")],
    ids=["no-limit", "not-an-integer-literal"],
)
def test_a_gate_without_a_readable_limit_has_no_sites(tmp_path: Path, gate: str) -> None:
    package = write_mini_sglang(tmp_path / "site", files={**FILES, COMM: gate})
    assert sglang_sites(from_directory(package)) is None


# --- mismatch: a saved bench result of another host, release or install ------------------------


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is UTC while the test runs, so a date printed from a timestamp is known."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def tree(tmp_path: Path) -> SglangTree:
    return from_directory(write_mini_sglang(tmp_path / "site"))


def facts_of(tree: SglangTree, **more: object) -> dict:
    """A saved result's facts that match ``tree`` and this host, with ``more``."""
    return {"host": socket.gethostname(), "release": tree.version, "tp": 2, **more}


def test_a_result_of_other_gate_bytes_than_record_lists_is_older_than_the_install(tree: SglangTree) -> None:
    said = mismatch(tree, facts_of(tree, gate_record_sha256="0" * 64), 2)
    assert said == "is older than the installed sglang files (RECORD lists other hashes: reinstalled since)"


def test_a_result_measured_before_the_install_names_when_it_was_installed(tree: SglangTree, utc: None) -> None:
    assert tree.dist_info is not None
    installed = 1_700_000_000  # 2023-11-14 22:13:20 UTC
    os.utime(tree.dist_info / "RECORD", (installed, installed))
    said = mismatch(tree, facts_of(tree, epoch=installed - 60), 2)
    assert said == "is older than the installed sglang files (installed 2023-11-14 22:13)"
    assert mismatch(tree, facts_of(tree, epoch=installed), 2) is None  # measured the moment pip finished


def test_a_result_of_gpus_this_host_does_not_have_says_it_has_none(tree: SglangTree) -> None:
    said = mismatch(tree, facts_of(tree, gpus=["NVIDIA H200", "NVIDIA H200"]), 2, gpus=[])
    assert said == "was measured on NVIDIA H200, NVIDIA H200, not on this host's GPUs (none)"
