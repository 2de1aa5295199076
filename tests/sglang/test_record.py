"""locate.tree: a wheel's RECORD read per file, and how an install is told apart."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from sm120patch.sglang.tree import InstallKind, Record, install_kind


def digest(data: bytes) -> tuple[str, str]:
    """(RECORD's spelling, hex) of ``data``'s sha256."""
    raw = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode(), raw.hex()


COMM, COMM_HEX = digest(b"communicator")
LONGER, LONGER_HEX = digest(b"another file")
RECORD = (
    "\n"  # SglangTree.record puts a newline first, so every row starts after one
    f"sglang/__init__.py,{digest(b'init')[0]},4\n"
    f"sglang/srt/layers/communicator.py.orig,{LONGER},12\n"
    f"other/sglang/srt/layers/flashinfer_comm_fusion.py,{LONGER},12\n"
    f"sglang/srt/layers/communicator.py,{COMM},12\n"
    "sglang/srt/server_args.py,md5=abc,3\n"
    "sglang/__pycache__/x.pyc,,\n"
)


def test_a_row_gives_the_hex_of_its_urlsafe_base64_digest() -> None:
    assert Record(RECORD, "sglang/").sha256("srt/layers/communicator.py") == COMM_HEX


def test_only_the_exact_path_under_the_prefix_matches() -> None:
    record = Record(RECORD, "sglang/")
    # Not a longer name that starts the same, not the same name under another directory.
    assert record.sha256("srt/layers/communicator.py.orig") == LONGER_HEX
    assert record.sha256("srt/layers/flashinfer_comm_fusion.py") is None
    assert record.sha256("srt/layers/communicator") is None
    assert Record(RECORD, "other/sglang/").sha256("srt/layers/flashinfer_comm_fusion.py") == LONGER_HEX


def test_a_row_without_a_sha256_or_no_prefix_gives_nothing() -> None:
    assert Record(RECORD, "sglang/").sha256("srt/server_args.py") is None  # another algorithm
    assert Record(RECORD, "sglang/").sha256("__pycache__/x.pyc") is None  # no hash at all
    unreadable = Record("", None, "no install metadata")
    assert unreadable.sha256("srt/layers/communicator.py") is None


def test_a_quoted_path_is_read_as_csv() -> None:
    record = Record(f'\nsglang/a.py,"{COMM}",12\n', "sglang/")
    assert record.sha256("a.py") == COMM_HEX


@pytest.mark.parametrize(
    ("dist_info", "direct_url", "kind"),
    [
        (Path("d.dist-info"), None, InstallKind.WHEEL),
        (Path("d.dist-info"), {"url": "file:///src", "dir_info": {"editable": True}}, InstallKind.EDITABLE),
        (Path("d.dist-info"), {"url": "file:///src", "dir_info": {}}, InstallKind.WHEEL),  # pip install ./src
        (Path("d.dist-info"), {"url": "https://x/y.whl", "archive_info": {}}, InstallKind.WHEEL),
        (None, None, InstallKind.PATH),
        (Path("d.dist-info"), ["not", "an", "object"], InstallKind.WHEEL),
        (Path("d.dist-info"), {"dir_info": "editable"}, InstallKind.WHEEL),
    ],
    ids=[
        "no direct_url",
        "editable",
        "directory",
        "archive",
        "no dist-info",
        "not an object",
        "dir_info not an object",
    ],
)
def test_install_kind_reads_pep_610(dist_info: Path | None, direct_url: object, kind: InstallKind) -> None:
    assert install_kind(dist_info, direct_url) is kind


@pytest.mark.parametrize(
    "damaged",
    [
        "sha256=!!!not-base64",
        "sha256=abcde",
        "sha256=" + "A" * 40,
        COMM[:17] + "!!!!" + COMM[17:],  # a lenient decoder would skip the "!"s and read a digest
    ],
)
def test_a_digest_that_is_no_base64_gives_nothing_rather_than_an_error(damaged: str) -> None:
    """A RECORD edited by hand or cut short: the file's pristine state is unknown, not a crash."""
    assert Record(f"\nsglang/a.py,{damaged},12\n", "sglang/").sha256("a.py") is None
