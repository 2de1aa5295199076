"""Odd and hostile input on real releases: each gets a clear message and leaves files whole."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from sm120patch.sglang.layout import COMMUNICATOR as COMM
from sm120patch.sglang.layout import SERVER_ARGS
from tests.support.cli import apply_all as apply
from tests.support.cli import revert_tree, run, run_process
from tests.support.realtrees import intended_changes, record_hashes, sha256

pytestmark = pytest.mark.slow  # real sglang releases from the package index


def snapshot(package: Path) -> dict[str, str]:
    return {rel: sha256(package / rel) for rel in (COMM, SERVER_ARGS)}


def test_file_edited_after_apply_is_not_reverted_without_force(release) -> None:
    package = release("0.5.9", hardlink=False)
    assert apply(package).exit_code == 0
    target = package / COMM
    edited = target.read_bytes() + b"# local tuning\n"
    target.write_bytes(edited)
    patched_args = sha256(package / SERVER_ARGS)

    code, out, err = run("revert", "--sglang-path", str(package))
    assert code == 1
    assert "refusing to revert" in err and COMM in err and "--force" in err
    assert target.read_bytes() == edited and sha256(package / SERVER_ARGS) == patched_args

    code, out, err = run("revert", "--sglang-path", str(package), "--force", "--json")
    data = json.loads(out)
    assert code == 0
    record = record_hashes(package)
    assert sha256(target) == record[COMM] and sha256(package / SERVER_ARGS) == record[SERVER_ARGS]
    kept = package / ".sm120patch" / "stale-overwritten" / COMM
    assert kept.read_bytes() == edited and any(str(kept) in m for m in data["messages"])


def test_a_target_linked_out_of_the_package_is_replaced_here_and_its_link_comes_back(release, tmp_path: Path) -> None:
    package = release("0.5.9", hardlink=False)
    real = tmp_path / "elsewhere" / "communicator.py"
    real.parent.mkdir()
    os.replace(package / COMM, real)
    (package / COMM).symlink_to(real)
    original = real.read_bytes()

    assert apply(package).exit_code == 0
    assert not (package / COMM).is_symlink() and real.read_bytes() == original
    assert sorted(intended_changes(original, (package / COMM).read_bytes())) == ["flag", "import", "or-term"]
    assert revert_tree(package).exit_code == 0
    assert os.readlink(package / COMM) == str(real) and real.read_bytes() == original


def test_crlf_bom_cookie_and_tabs_are_kept_byte_for_byte(release) -> None:
    package = release("0.5.9", hardlink=False)
    target = package / COMM
    lines = target.read_text().split("\n")
    # Tabs for leading indentation, a coding cookie, CRLF line ends and a UTF-8 BOM.
    tabbed = []
    for line in lines:
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        tabbed.append("\t" * (indent // 4) + " " * (indent % 4) + stripped)
    text = "# -*- coding: utf-8 -*-\r\n" + "\r\n".join(tabbed)
    odd = b"\xef\xbb\xbf" + text.encode()
    compile(odd, COMM, "exec")
    target.write_bytes(odd)

    assert apply(package).exit_code == 0
    patched = target.read_bytes()
    assert patched.startswith(b"\xef\xbb\xbf# -*- coding: utf-8 -*-\r\n")
    assert b"\n" not in patched.replace(b"\r\n", b"")  # every line still ends in CRLF
    assert b"\r\n\tis_sm100_supported,\r\n\tis_sm120_supported,\r\n" in patched
    assert b"\r\n_is_sm120_supported = _is_cuda and is_sm120_supported()\r\n" in patched
    assert sorted(intended_changes(odd, patched)) == ["flag", "import", "or-term"]
    removed = [line for line in odd.split(b"\r\n") if line not in patched.split(b"\r\n")]
    assert removed == [b"\t\t(_is_sm90_supported or _is_sm100_supported)"]
    assert revert_tree(package).exit_code == 0
    assert target.read_bytes() == odd


@pytest.mark.skipif(os.geteuid() != 0, reason="changing the owner needs root")
def test_mode_and_owner_survive_apply_and_revert(release) -> None:
    package = release("0.5.9", hardlink=False)
    target = package / COMM
    os.chmod(target, 0o640)
    os.chown(target, 1234, 2345)
    assert apply(package).exit_code == 0
    st = target.stat()
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o640, 1234, 2345)
    assert revert_tree(package).exit_code == 0
    st = target.stat()
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o640, 1234, 2345)


def _immutable(path: Path, on: bool) -> bool:
    proc = subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True)
    return proc.returncode == 0


@pytest.mark.parametrize("what", ["file", "directory"])
def test_read_only_target_is_refused_before_anything_is_written(release, what: str) -> None:
    """Immutable (chattr +i) holds even for root, which ignores permission bits."""
    package = release("0.5.9", hardlink=False)
    locked = package / COMM if what == "file" else (package / COMM).parent
    before = snapshot(package)
    if not _immutable(locked, True):
        pytest.skip("chattr +i is not available here")
    try:
        code, _out, err = run("apply", "--sglang-path", str(package))
    finally:
        _immutable(locked, False)
    assert code == 2
    assert "cannot be replaced" in err and "no sglang file was changed" in err
    assert snapshot(package) == before  # server_args.py was writable, and is untouched too
    assert not (package / ".sm120patch" / "manifest.json").exists()


def test_read_only_package_dir_cannot_hold_state(release) -> None:
    package = release("0.5.9", hardlink=False)
    if not _immutable(package, True):
        pytest.skip("chattr +i is not available here")
    try:
        code, _out, err = run("apply", "--sglang-path", str(package))
        verify_code, _, _ = run("verify", "--sglang-path", str(package))
    finally:
        _immutable(package, False)
    assert code == 2 and "cannot create the state directory" in err
    assert verify_code == 1  # reading still works
    assert snapshot(package) == {rel: record_hashes(package)[rel] for rel in (COMM, SERVER_ARGS)}


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ("{not json", "is corrupted"),
        ('{"format": 99, "files": {}}', "written by a newer sm120patch"),
        ('{"format": 1, "nonsense": 1}', "is corrupted"),
    ],
)
def test_corrupted_or_newer_state_is_an_environment_error(release, manifest: str, message: str) -> None:
    package = release("0.5.9")
    assert apply(package).exit_code == 0
    patched = snapshot(package)
    (package / ".sm120patch" / "manifest.json").write_text(manifest)
    for command in ("verify", "revert", "apply"):
        code, _out, err = run(command, "--sglang-path", str(package))
        assert code == 2, command
        assert message in err and "Traceback" not in err
    assert snapshot(package) == patched


def test_python_that_is_not_an_interpreter(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho not json\n")
    fake.chmod(0o755)
    code, _out, err = run("verify", "--python", str(fake))
    assert code == 2 and "was not understood (not find_sglang's JSON); its first line: not json" in err
    proc = run_process("verify", "--python", fake, "--sglang-path", tmp_path)
    assert proc.returncode == 2 and "either --python or --sglang-path" in proc.stderr


def test_reapply_after_a_hand_edit_keeps_the_earlier_backup(release) -> None:
    """Someone undid the gate by hand and added a line; apply patches again and backs up
    their version, but the pristine backup of the first apply is kept aside, not lost."""
    package = release("0.5.9", hardlink=False)
    assert apply(package).exit_code == 0
    target = package / COMM
    hand = (
        target.read_text().replace(
            "(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)",
            "(_is_sm90_supported or _is_sm100_supported)",
        )
        + "# tuned by hand\n"
    )
    target.write_text(hand)
    outcome = apply(package)
    assert outcome.exit_code == 0 and outcome.written == [COMM]
    (kept,) = (package / ".sm120patch").glob("stale-superseded-*/communicator.py")
    assert sha256(kept) == record_hashes(package)[COMM]
    assert revert_tree(package).exit_code == 0
    assert target.read_text() == hand  # revert undoes sm120patch's change, not the user's
