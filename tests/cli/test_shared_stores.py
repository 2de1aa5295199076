"""sglang's files shared with a store (uv's cache, conda's pkgs, a checkout): apply patches
this environment only, and revert leaves it as installed, links included.  On the miniature
release laid out as the installers lay it out (tests/support/shared_store.py); the real
installers are in test_shared_stores_real.py."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from sm120patch.errors import EnvironmentProblem, ExitCode
from sm120patch.patcher.commands import shared_files
from sm120patch.patcher.commands.apply import apply
from sm120patch.patcher.commands.revert import revert
from sm120patch.patcher.plan.registry import all_patches
from sm120patch.patcher.transaction import fsutil, journal, links
from sm120patch.patcher.transaction import state_dir as state_module
from sm120patch.patcher.transaction.state_dir import StateDir
from sm120patch.runner.locate import _from_probe
from sm120patch.runner.remote import find_sglang
from sm120patch.sglang.tree import from_directory
from tests.support.cli import apply_all, revert_tree, verify_tree
from tests.support.mini_sglang import COMM, FILES, FUSION, SERVER_ARGS, write_mini_sglang
from tests.support.shared_store import linked_site, links_of, store_digest

TARGETS = sorted((COMM, FUSION, SERVER_ARGS))
ORIGINAL = {rel: FILES[rel].encode() for rel in TARGETS}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """An installer's cache holding the miniature release."""
    root = tmp_path / "cache" / "archive-v0" / "abc123"
    write_mini_sglang(root)
    return root


def test_two_environments_linked_to_one_store_apply_patches_only_the_one_asked(tmp_path: Path, store: Path) -> None:
    a = linked_site(store, tmp_path / "a")
    b = linked_site(store, tmp_path / "b")
    links_before = links_of(a, TARGETS)
    assert all(links_before.values())
    store_before, b_before = store_digest(store), store_digest(b.parent)
    a_before = store_digest(a.parent)

    applied = apply_all(a)
    assert applied.exit_code == ExitCode.OK and sorted(applied.written) == TARGETS
    assert links_of(a, TARGETS) == dict.fromkeys(TARGETS)  # each a file of its own now
    assert all((a / rel).read_bytes() != ORIGINAL[rel] for rel in TARGETS)
    assert store_digest(store) == store_before and store_digest(b.parent) == b_before
    assert any(f"were links into {store / 'sglang'}" in n and "was not written" in n for n in applied.notes)
    manifest = json.loads((a / ".sm120patch" / "manifest.json").read_text())
    assert {rel: manifest["files"][rel]["link"] for rel in TARGETS} == links_before

    other = verify_tree(b)
    assert other.exit_code == ExitCode.NOT_AS_ASKED
    assert other.headline.startswith("not patched: the files are sglang 0.5.11's release files")
    assert any("are links into" in n and "in this environment only" in n for n in other.notes)
    mine = verify_tree(a)
    assert (mine.exit_code, mine.code, mine.written) == (ExitCode.OK, None, [])

    reverted = revert_tree(a)
    assert (reverted.exit_code, reverted.code, reverted.written) == (ExitCode.OK, None, TARGETS)
    assert reverted.notes == ["the files that were links into an installer's cache are links again, as installed"]
    assert links_of(a, TARGETS) == links_before
    assert store_digest(a.parent) == a_before  # every name as installed, the state gone
    assert store_digest(store) == store_before and store_digest(b.parent) == b_before


def test_a_hard_linked_install_gets_files_of_its_own_and_the_other_links_keep_their_bytes(
    tmp_path: Path, store: Path
) -> None:
    a = linked_site(store, tmp_path / "a", mode="hardlink")
    b = linked_site(store, tmp_path / "b", mode="hardlink")
    assert (a / COMM).stat().st_nlink == 3
    store_before = store_digest(store)

    seen = verify_tree(a)
    assert any(n.startswith("this install shares files with a cache: ") and "sglang/" + COMM in n for n in seen.notes)
    applied = apply_all(a)
    assert applied.exit_code == ExitCode.OK
    assert any("shared their data with other hard links" in n for n in applied.notes)
    assert all((a / rel).stat().st_nlink == 1 and (a / rel).read_bytes() != ORIGINAL[rel] for rel in TARGETS)
    assert store_digest(store) == store_before
    assert {rel: (b / rel).read_bytes() for rel in TARGETS} == ORIGINAL
    assert (b / COMM).stat().st_nlink == 2  # the store and b, no longer a
    assert verify_tree(b).exit_code == ExitCode.NOT_AS_ASKED

    assert revert_tree(a).exit_code == ExitCode.OK
    assert {rel: (a / rel).read_bytes() for rel in TARGETS} == ORIGINAL
    assert store_digest(store) == store_before


@pytest.mark.offline
def test_a_package_directory_linked_to_a_checkout_patches_the_checkout_and_says_so(tmp_path: Path) -> None:
    checkout = write_mini_sglang(tmp_path / "git" / "sglang" / "python")
    shutil.rmtree(next(checkout.parent.glob("sglang-*.dist-info")))  # a checkout has no dist-info
    site = tmp_path / "venv" / "site-packages"
    site.mkdir(parents=True)
    (site / "sglang").symlink_to(checkout)

    tree = from_directory(site)
    assert (tree.package_dir, tree.linked_from) == (checkout, site / "sglang")
    outcome = apply(tree, list(all_patches()))
    assert outcome.exit_code == ExitCode.OK
    assert f"sglang is a link to {checkout}: patching the checkout" in outcome.notes
    assert (site / "sglang").is_symlink() and (checkout / ".sm120patch" / "manifest.json").is_file()
    assert all((checkout / rel).read_bytes() != ORIGINAL[rel] for rel in TARGETS)
    assert not any(p.is_symlink() for p in checkout.rglob("*"))
    reverted = revert_tree(site / "sglang")
    assert reverted.exit_code == ExitCode.OK
    assert f"sglang is a link to {checkout}: restored the checkout" in reverted.notes
    assert {rel: (checkout / rel).read_bytes() for rel in TARGETS} == ORIGINAL


@pytest.mark.offline
def test_the_probe_names_a_package_directory_that_is_a_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checkout = write_mini_sglang(tmp_path / "checkout")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sglang").symlink_to(checkout)
    monkeypatch.syspath_prepend(str(site))
    found = find_sglang.find()
    assert (found["package_dir"], found["package_link"]) == (str(checkout), str(site / "sglang"))
    tree = _from_probe(found, "this interpreter")
    assert tree is not None and tree.linked_from == site / "sglang"

    monkeypatch.syspath_prepend(str(checkout.parent))  # the real folder first: no link
    assert find_sglang.find()["package_link"] is None


def test_a_dry_run_apply_says_what_it_would_do_with_the_links_and_touches_none(tmp_path: Path, store: Path) -> None:
    a = linked_site(store, tmp_path / "a")
    links_before, store_before = links_of(a, TARGETS), store_digest(store)
    dry = apply(from_directory(a), list(all_patches()), dry_run=True)
    assert (dry.code, dry.written, dry.headline.startswith("dry run: would change 3 files")) == (None, [], True)
    names = ", ".join(f"sglang/{rel}" for rel in TARGETS)
    assert (
        f"{names} are links into {store / 'sglang'} (an installer's cache, as uv's --link-mode=symlink makes): apply "
        "replaces the links in this environment only, never the files they lead to"
    ) in dry.notes
    assert links_of(a, TARGETS) == links_before and store_digest(store) == store_before


def test_a_package_directory_linked_into_a_store_is_refused_and_nothing_is_written(tmp_path: Path, store: Path) -> None:
    site = tmp_path / "venv" / "site-packages"
    site.mkdir(parents=True)
    (site / "sglang").symlink_to(store / "sglang")
    before = store_digest(store)
    with pytest.raises(EnvironmentProblem) as refused:
        apply(from_directory(site), list(all_patches()))
    assert str(refused.value) == (
        f"{site / 'sglang'} is a link to {store / 'sglang'}, the files of an installed wheel "
        "(sglang-0.5.11.dist-info beside it) in a store that other environments may share; sm120patch writes only "
        "this environment's own files. Nothing was written. Install sglang with copied files (uv: --link-mode=copy) "
        "to patch it"
    )
    assert refused.value.code == "shared-store"
    assert store_digest(store) == before and not (store / "sglang" / ".sm120patch").exists()
    with pytest.raises(EnvironmentProblem) as dry:  # a dry run says what the real one would do
        apply(from_directory(site), list(all_patches()), dry_run=True)
    assert str(dry.value) == str(refused.value)
    seen = verify_tree(site / "sglang")
    assert seen.exit_code == ExitCode.NOT_AS_ASKED
    assert (
        seen.headline.endswith(f"apply would refuse: {refused.value}") and "Run `sm120patch apply`" not in seen.headline
    )
    assert not any("patching the checkout" in n for n in seen.notes)
    assert store_digest(store) == before


def test_a_folder_of_the_package_linked_into_a_store_is_refused(tmp_path: Path, store: Path) -> None:
    site = tmp_path / "a"
    package = write_mini_sglang(site)
    shutil.rmtree(package / "srt" / "layers")
    (package / "srt" / "layers").symlink_to(store / "sglang" / "srt" / "layers")
    before = store_digest(store)
    with pytest.raises(EnvironmentProblem) as refused:
        apply_all(package)
    message = str(refused.value)
    assert refused.value.code == "shared-store"
    assert f"{package / COMM}: its folder is a link to {store / 'sglang' / 'srt' / 'layers'}" in message
    assert "Nothing was written" in message
    assert store_digest(store) == before
    assert (package / SERVER_ARGS).read_bytes() == ORIGINAL[SERVER_ARGS]
    assert not (package / ".sm120patch").exists()
    with pytest.raises(EnvironmentProblem) as dry:
        apply(from_directory(package.parent), list(all_patches()), dry_run=True)
    assert str(dry.value) == message
    seen = verify_tree(package)
    assert seen.exit_code == ExitCode.NOT_AS_ASKED and seen.headline.endswith(f"apply would refuse: {message}")
    # the report's write targets leave out the files of the linked folder, and only those
    assert list(shared_files.targets(from_directory(package.parent), [COMM, SERVER_ARGS])) == [SERVER_ARGS]


def test_a_link_inside_the_package_is_followed_to_the_package_file(tmp_path: Path) -> None:
    """A link from one sglang file to another is the package's own: the real file is patched
    and the link stays a link, as before."""
    package = write_mini_sglang(tmp_path / "site")
    real = package / "srt" / "layers" / "_communicator_impl.py"
    os.replace(package / COMM, real)
    (package / COMM).symlink_to(real.name)
    assert apply_all(package).exit_code == ExitCode.OK
    assert os.readlink(package / COMM) == real.name and real.read_bytes() != ORIGINAL[COMM]
    assert revert_tree(package).exit_code == ExitCode.OK
    assert os.readlink(package / COMM) == real.name and real.read_bytes() == ORIGINAL[COMM]


def test_revert_after_the_store_lost_a_file_restores_it_from_the_backup(tmp_path: Path, store: Path) -> None:
    """``uv cache clean`` after apply: the link revert would put back leads nowhere, so the
    original comes back as a file of its own, from the backup, and revert says so."""
    a = linked_site(store, tmp_path / "a")
    links = links_of(a, TARGETS)
    assert apply_all(a).exit_code == ExitCode.OK
    (store / "sglang" / COMM).unlink()
    reverted = revert_tree(a)
    assert reverted.exit_code == ExitCode.OK
    assert not (a / COMM).is_symlink() and (a / COMM).read_bytes() == ORIGINAL[COMM]
    assert reverted.notes == [
        f"sglang/{COMM} was a link to {links[COMM]}, which no longer holds the release's file (the installer's "
        "cache was cleaned?): restored the original as a file of its own",
        "the files that were links into an installer's cache are links again, as installed",  # the other two
    ]
    assert links_of(a, [FUSION, SERVER_ARGS]) == {FUSION: links[FUSION], SERVER_ARGS: links[SERVER_ARGS]}


def test_a_reinstall_in_between_is_what_revert_puts_back(tmp_path: Path, store: Path) -> None:
    """Linked, applied, then reinstalled with copies and applied again: revert leaves the
    copies; and the other way round, links again after an apply: revert puts the links back."""
    a = linked_site(store, tmp_path / "a")
    links = links_of(a, TARGETS)
    assert apply_all(a).exit_code == ExitCode.OK
    for rel in TARGETS:  # uv pip install --reinstall --link-mode=copy
        (a / rel).unlink()
        (a / rel).write_bytes(ORIGINAL[rel])
    assert apply_all(a).exit_code == ExitCode.OK
    assert revert_tree(a).exit_code == ExitCode.OK
    assert links_of(a, TARGETS) == dict.fromkeys(TARGETS)
    assert {rel: (a / rel).read_bytes() for rel in TARGETS} == ORIGINAL

    assert apply_all(a).exit_code == ExitCode.OK
    for rel in TARGETS:  # uv pip install --reinstall --link-mode=symlink
        (a / rel).unlink()
        (a / rel).symlink_to(links[rel])
    assert apply_all(a).exit_code == ExitCode.OK
    assert revert_tree(a).exit_code == ExitCode.OK
    assert links_of(a, TARGETS) == links


class Killed(BaseException):
    """Stands in for SIGKILL at a step of the write path: nothing after it runs."""


@pytest.mark.parametrize("command", ["apply", "revert"])
@pytest.mark.parametrize("nth", [1, 2, 3, 4, 5, 6, 7])
def test_a_run_killed_at_any_step_over_links_is_finished_by_the_next(
    tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch, command: str, nth: int
) -> None:
    """Killed at the nth step of replacing the targets (each a write and a rename, of a file
    or of a link): every target is as installed or fully changed, never half, and the next
    revert leaves this environment as installed, links and all; the store is never written."""
    a = linked_site(store, tmp_path / "a")
    links = links_of(a, TARGETS)
    installed, before = store_digest(a.parent), store_digest(store)
    if command == "revert":
        assert apply_all(a).exit_code == ExitCode.OK
    patched = {rel: (a / rel).read_bytes() if command == "revert" else None for rel in TARGETS}
    seen: list[str] = []

    def kill(step: str) -> None:
        if step in ("replace", "write", "rename") and (a / ".sm120patch" / "journal.json").exists():
            seen.append(step)
            if len(seen) == nth:
                raise Killed

    monkeypatch.setattr(fsutil, "STEP_HOOK", kill)
    with pytest.raises(Killed):
        apply_all(a) if command == "apply" else revert_tree(a)
    monkeypatch.setattr(fsutil, "STEP_HOOK", None)
    for rel in TARGETS:
        here = (a / rel).read_bytes()
        assert links_of(a, [rel])[rel] == links[rel] or (not (a / rel).is_symlink() and here != ORIGINAL[rel])
        assert patched[rel] is None or (a / rel).is_symlink() or here == patched[rel]
    outcome = revert_tree(a)
    assert outcome.exit_code == ExitCode.OK, outcome.headline
    assert outcome.notes[0].startswith(f"recovered an interrupted {command}")
    assert links_of(a, TARGETS) == links and store_digest(a.parent) == installed
    assert store_digest(store) == before


def test_revert_over_a_name_that_is_a_link_out_of_the_package_finishes(tmp_path: Path, store: Path) -> None:
    """A state with no link recorded (a file of its own was patched, as an older sm120patch
    recorded every file) while the name is now a symlink to a copy of the patched bytes:
    revert replaces the link by the original, and no journal is left behind."""
    package = write_mini_sglang(tmp_path / "site")
    assert apply_all(package).exit_code == ExitCode.OK
    outside = tmp_path / "elsewhere" / "copy.py"
    outside.parent.mkdir()
    outside.write_bytes((package / COMM).read_bytes())
    (package / COMM).unlink()
    (package / COMM).symlink_to(outside)
    manifest = json.loads((package / ".sm120patch" / "manifest.json").read_text())
    assert all("link" not in record for record in manifest["files"].values())

    reverted = revert_tree(package)
    assert reverted.exit_code == ExitCode.OK, reverted.headline
    assert not (package / COMM).is_symlink()
    assert {rel: (package / rel).read_bytes() for rel in TARGETS} == ORIGINAL
    assert not (package / ".sm120patch").exists()
    assert outside.read_bytes() != ORIGINAL[COMM]  # the file the link led to is not written


def test_a_state_that_records_links_has_a_format_an_older_sm120patch_calls_newer(
    tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Format 4 only where a link is recorded (the manifest of an apply over links, the journal
    of a revert that puts links back): a tool of format 3 says "upgrade", not "corrupted"."""
    plain = write_mini_sglang(tmp_path / "plain")
    assert apply_all(plain).exit_code == ExitCode.OK
    assert json.loads((plain / ".sm120patch" / "manifest.json").read_text())["format"] == 2
    a = linked_site(store, tmp_path / "a")
    assert apply_all(a).exit_code == ExitCode.OK
    assert json.loads((a / ".sm120patch" / "manifest.json").read_text())["format"] == 4

    journals: list[int] = []
    real = journal.StateDir.write_json

    def watched(self: journal.StateDir, path: Path, data: dict[str, object]) -> None:
        if path.name == "journal.json":
            journals.append(int(str(data["format"])))
        real(self, path, data)

    monkeypatch.setattr(journal.StateDir, "write_json", watched)
    assert revert_tree(a).exit_code == ExitCode.OK
    assert revert_tree(plain).exit_code == ExitCode.OK
    assert journals == [4, 1]

    assert apply_all(a).exit_code == ExitCode.OK
    monkeypatch.setattr(state_module, "FORMAT", 3)  # sm120patch as it was before links were recorded
    with pytest.raises(EnvironmentProblem, match="was written by a newer sm120patch"):
        StateDir(a).load()


def test_a_cache_patched_through_its_links_by_an_older_sm120patch_is_named_and_verify_is_not_green(
    tmp_path: Path, store: Path
) -> None:
    """An older sm120patch wrote through uv's links into the cache: every environment linked to
    it holds patched bytes that no state of its own records.  verify says so in one line, with
    the fix, and is not green."""
    patched = write_mini_sglang(tmp_path / "patched")
    assert apply_all(patched).exit_code == ExitCode.OK
    for rel in TARGETS:  # what the older tool left in the cache
        (store / "sglang" / rel).write_bytes((patched / rel).read_bytes())
    other = linked_site(store, tmp_path / "y")
    seen = verify_tree(other)
    assert (seen.exit_code, seen.code) == (ExitCode.NOT_AS_ASKED, "shared-store")
    assert seen.headline.startswith(f"{', '.join('sglang/' + r for r in TARGETS)} are links into {store / 'sglang'}")
    assert "written by an earlier sm120patch" in seen.headline and "`uv cache clean sglang`" in seen.headline
    assert verify_tree(patched).exit_code == ExitCode.OK  # files of its own, patched by apply: green
    assert seen.headline in apply_all(other).notes  # "already applied", and why


def test_a_dry_run_revert_that_puts_a_link_back_without_its_backup_shows_what_the_link_leads_to(
    tmp_path: Path, store: Path
) -> None:
    a = linked_site(store, tmp_path / "a")
    assert apply_all(a).exit_code == ExitCode.OK
    (a / ".sm120patch" / "backups" / COMM).unlink()  # the link leads to the release's file: not needed
    dry = revert(from_directory(a), dry_run=True)
    assert dry.exit_code == ExitCode.OK, dry.headline
    assert {rel: after for rel, _, after in dry.changes} == ORIGINAL


def test_verify_says_what_apply_would_do_with_links_only_when_there_is_something_to_apply(
    tmp_path: Path, store: Path
) -> None:
    patched = write_mini_sglang(tmp_path / "patched")
    assert apply_all(patched).exit_code == ExitCode.OK
    a = linked_site(store, tmp_path / "a")
    pending = verify_tree(a)
    assert any("apply replaces the links in this environment only" in n for n in pending.notes)
    for rel in TARGETS:  # links to patched files: nothing left to apply
        (store / "sglang" / rel).write_bytes((patched / rel).read_bytes())
    done = verify_tree(a)
    assert not any("apply replaces the links" in n for n in done.notes)
    assert f"{', '.join('sglang/' + r for r in TARGETS)} are links into {store / 'sglang'}" in done.notes


def test_links_into_a_store_kept_by_content_hash_name_the_store_folder(tmp_path: Path) -> None:
    """A store that keeps each file under its hash (not under the package's own paths): the
    note names the folder the links lead into, not a folder the package's layout would put
    above them."""
    package = write_mini_sglang(tmp_path / "site")
    objects = tmp_path / "store" / "objects"
    objects.mkdir(parents=True)
    for rel in TARGETS:
        stored = objects / fsutil.sha256((package / rel).read_bytes())
        (package / rel).rename(stored)
        (package / rel).symlink_to(stored)
    names = ", ".join(f"sglang/{rel}" for rel in TARGETS)
    [note] = [n for n in verify_tree(package).notes if n.startswith(f"{names} are links into ")]
    assert note.startswith(f"{names} are links into {objects} (an installer's cache")


def _linked(rel: str) -> links.Target:
    """A file of the package that is a symlink into a store at /cache/abc (none is read)."""
    return links.Target(
        Path("/site") / rel, link=f"/cache/abc/sglang/{rel}", store_file=Path("/cache/abc/sglang") / rel
    )


@pytest.mark.parametrize(
    ("rels", "written", "brief", "start"),
    [
        ([COMM], False, True, f"sglang/{COMM} is a link into /cache/abc/sglang"),
        ([COMM, FUSION], False, True, f"sglang/{COMM}, sglang/{FUSION} are links into /cache/abc/sglang"),
        ([COMM], False, False, f"sglang/{COMM} is a link into /cache/abc/sglang (an installer's cache"),
        ([COMM], True, False, f"sglang/{COMM} was a link into /cache/abc/sglang: each link here was replaced"),
        ([COMM, FUSION], True, False, f"sglang/{COMM}, sglang/{FUSION} were links into /cache/abc/sglang: each"),
    ],
    ids=["one, verify", "two, verify", "one, before apply", "one, applied", "two, applied"],
)
def test_the_sentence_about_links_agrees_with_how_many_files_are_links(
    rels: list[str], written: bool, brief: bool, start: str
) -> None:
    [line] = shared_files.notes({rel: _linked(rel) for rel in rels}, written=written, brief=brief)
    assert line.startswith(start)


BEFORE = "this install shares files with a cache: {} other hard links (uv's default, conda's pkgs); apply gives each a \
file of its own and leaves the others' bytes as they are"
APPLIED = (
    "{} data with other hard links (an installer's cache: uv's default, conda's pkgs): each got a file of its own, \
the other links keep the release's bytes"
)
VERIFY = "{} other hard links (an installer's cache)"


@pytest.mark.parametrize(
    ("rels", "written", "brief", "said"),
    [
        ([COMM], False, False, BEFORE.format(f"sglang/{COMM} has")),
        ([COMM, FUSION], False, False, BEFORE.format(f"sglang/{COMM}, sglang/{FUSION} have")),
        ([COMM], True, False, APPLIED.format(f"sglang/{COMM} shared its")),
        ([COMM, FUSION], True, False, APPLIED.format(f"sglang/{COMM}, sglang/{FUSION} shared their")),
        ([COMM], False, True, VERIFY.format(f"sglang/{COMM} has")),
        ([COMM, FUSION], False, True, VERIFY.format(f"sglang/{COMM}, sglang/{FUSION} have")),
    ],
    ids=["one", "two", "one, applied", "two, applied", "one, verify", "two, verify"],
)
def test_the_sentence_about_hard_links_agrees_with_how_many_files_have_them(
    rels: list[str], written: bool, brief: bool, said: str
) -> None:
    found = {rel: links.Target(Path("/site") / rel, shared=2) for rel in rels}
    assert shared_files.notes(found, written=written, brief=brief) == [said]
