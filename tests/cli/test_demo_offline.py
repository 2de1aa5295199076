"""``sm120patch demo`` in this process, without the network: where downloads are cached,
the pip command that downloads a release, and the whole cycle's report on the miniature
release packed as a wheel.

Fakes: ``FakePip`` stands for ``pip download`` (demo's only use of ``subprocess``): it records
the command and "downloads" by copying a wheel built from the miniature release into the
folder it was given, or fails as pip does.  The slow tier (test_demo.py) downloads real releases.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tempfile
import types
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from rich.console import Console

from sm120patch.errors import EnvironmentProblem
from sm120patch.patcher.commands import demo
from tests.support.cli import run
from tests.support.mini_sglang import COMM, SERVER_ARGS, write_mini_sglang
from tests.support.terminal import ANSI

PLATFORMS = ["manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any"]


def wheel_of(site: Path, wheel: Path) -> Path:
    """The installed tree under ``site`` packed as a wheel (demo only unzips it)."""
    with zipfile.ZipFile(wheel, "w") as archive:
        for path in sorted(site.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(site).as_posix())
    return wheel


def mini_wheel(tmp: Path, name: str = "sglang-0.5.11-py3-none-any.whl") -> Path:
    return wheel_of(write_mini_sglang(tmp / "wheel-site").parent, tmp / name)


@dataclass
class FakePip:
    """Fake ``pip download``: records each command; copies ``wheel`` (if any) into ``-d``
    under ``name``, exits ``returncode`` and prints ``stderr``."""

    wheel: Path | None
    name: str = ""
    returncode: int = 0
    stderr: str = ""
    calls: list[tuple[list[str], dict]] = field(default_factory=list)

    def run(self, cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        self.calls.append((cmd, kwargs))
        if self.wheel is not None:
            shutil.copy(self.wheel, Path(cmd[cmd.index("-d") + 1]) / self.name)
        return subprocess.CompletedProcess(cmd, self.returncode, "", self.stderr)


@pytest.fixture
def scratch_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Demo's scratch directories made here, so a test sees only its own."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def use_pip(monkeypatch: pytest.MonkeyPatch, pip: FakePip) -> FakePip:
    monkeypatch.setattr(demo, "subprocess", types.SimpleNamespace(run=pip.run))
    return pip


# --- where downloads are kept ---------------------------------------------------------------------


def test_the_cache_is_sm120patch_cache_else_xdg_else_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SM120PATCH_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("SM120PATCH_WHEEL_CACHE", raising=False)
    assert demo.cache_root() == tmp_path / "mine"
    assert demo.wheel_cache() == tmp_path / "mine" / "wheels"
    monkeypatch.setenv("SM120PATCH_CACHE", "")  # set but empty: not a folder
    assert demo.cache_root() == tmp_path / "xdg" / "sm120patch"
    monkeypatch.delenv("SM120PATCH_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert demo.cache_root() == tmp_path / "home" / ".cache" / "sm120patch"
    monkeypatch.setenv("SM120PATCH_WHEEL_CACHE", str(tmp_path / "wheels-here"))
    assert demo.wheel_cache() == tmp_path / "wheels-here"


# --- fetching a release ---------------------------------------------------------------------------


def test_a_cached_wheel_is_used_without_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SM120PATCH_WHEEL_CACHE", str(tmp_path))
    for name in ("sglang-0.5.9-py3-none-manylinux.whl", "sglang-0.5.9-py3-none-any.whl", "sglang-0.5.10-any.whl"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "flashinfer_python-0.6.17-py3-none-any.whl").write_bytes(b"")
    pip = use_pip(monkeypatch, FakePip(None))
    assert demo.fetch_wheel("0.5.9") == tmp_path / "sglang-0.5.9-py3-none-any.whl"  # the first, sorted
    assert demo.fetch("flashinfer-python", "0.6.17") == tmp_path / "flashinfer_python-0.6.17-py3-none-any.whl"
    assert pip.calls == []


def test_a_release_not_cached_is_downloaded_without_dependencies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache" / "wheels"  # not there yet
    monkeypatch.setenv("SM120PATCH_WHEEL_CACHE", str(cache))
    pip = use_pip(monkeypatch, FakePip(mini_wheel(tmp_path), "sglang-0.5.9-py3-none-any.whl"))
    assert demo.fetch_wheel("0.5.9") == cache / "sglang-0.5.9-py3-none-any.whl"
    ((cmd, kwargs),) = pip.calls
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert cmd == [
        sys.executable,
        *("-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check"),
        *("--python-version", python, "--implementation", "cp"),
        *(arg for platform in PLATFORMS for arg in ("--platform", platform)),
        *("-d", str(cache), "sglang==0.5.9"),
    ]
    assert kwargs == {"capture_output": True, "text": True}
    assert demo.fetch_wheel("0.5.9") == cache / "sglang-0.5.9-py3-none-any.whl" and len(pip.calls) == 1


@pytest.mark.parametrize(
    ("returncode", "stderr", "said"),
    [
        (1, "Looking in indexes\nERROR: No matching distribution found for sglang==9.9\n", "ERROR: No matching"),
        (1, "", "no output"),
        (0, "  \n", "no output"),  # pip said it worked, yet no wheel is there
    ],
)
def test_a_download_that_fails_says_pips_last_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, returncode: int, stderr: str, said: str
) -> None:
    monkeypatch.setenv("SM120PATCH_WHEEL_CACHE", str(tmp_path))
    use_pip(monkeypatch, FakePip(None, returncode=returncode, stderr=stderr))
    with pytest.raises(EnvironmentProblem) as raised:
        demo.fetch_wheel("9.9")
    message = f"could not download sglang==9.9 with pip: {said}"
    assert str(raised.value) == (message if said == "no output" else message + " distribution found for sglang==9.9")
    assert raised.value.code == "download"


def test_pip_failing_after_writing_a_wheel_is_a_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SM120PATCH_WHEEL_CACHE", str(tmp_path))
    use_pip(monkeypatch, FakePip(mini_wheel(tmp_path / "w"), "sglang-0.5.9-x.whl", returncode=1, stderr="killed"))
    with pytest.raises(EnvironmentProblem, match=r"^could not download sglang==0\.5\.9 with pip: killed$"):
        demo.fetch_wheel("0.5.9")


# --- the cycle ------------------------------------------------------------------------------------


def test_demo_names_its_scratch_folder_whole_in_a_narrow_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scratch_tmp: Path
) -> None:
    """One line the terminal wraps, not folded at 40 columns: the folder copies whole."""
    monkeypatch.setenv("SM120PATCH_WHEEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "40")
    use_pip(monkeypatch, FakePip(mini_wheel(tmp_path), "sglang-0.5.9-py3-none-any.whl"))
    code, _, err = run("demo")
    first = err.splitlines()[0]
    assert code == 0 and first.startswith("sm120patch demo: sglang-0.5.9-py3-none-any.whl unpacked into ")
    assert Path(first.rpartition(" unpacked into ")[2]).parent == scratch_tmp


def test_demo_downloads_the_pinned_release_and_runs_the_cycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scratch_tmp: Path
) -> None:
    monkeypatch.setenv("SM120PATCH_WHEEL_CACHE", str(tmp_path / "cache"))
    pip = use_pip(monkeypatch, FakePip(mini_wheel(tmp_path), "sglang-0.5.9-py3-none-any.whl"))
    code, out, err = run("demo")
    assert (code, out) == (0, ""), err
    assert pip.calls[0][0][-1] == "sglang==0.5.9"
    lines = err.splitlines()
    assert lines[0].startswith("sm120patch demo: sglang-0.5.9-py3-none-any.whl unpacked into ")
    scratch = Path(lines[0].rpartition(" unpacked into ")[2])
    assert scratch.parent == scratch_tmp and scratch.name.startswith("sm120patch-demo-")
    rules = {line.strip("─ "): i for i, line in enumerate(lines) if line.startswith("───")}
    assert list(rules) == ["sm120patch apply", "then", "result"]
    # the first step in full (no evidence, no per-file hashes), each later one in a line
    full = lines[rules["sm120patch apply"] + 1 : rules["then"]]
    assert f"sglang 0.5.11  {scratch}/site-packages/sglang  [wheel]" in full
    assert any(line.startswith("  communicator-fusion-gate   pending -> applied") for line in full)
    assert full[-1] == f"patched 3 files; backups in {scratch}/site-packages/sglang/.sm120patch"
    assert not any("evidence" in line or "RECORD" in line for line in full)
    assert "ok sm120patch verify: all patches applied" in lines
    assert "ok sm120patch apply again (must change nothing): already applied: nothing to change" in lines
    assert any(line.startswith("ok sm120patch revert: restored 3 files") for line in lines)
    assert err.count("warning: [kernel-missing] FlashInfer is not installed here") == 1  # said once, not once a step
    assert err.count("pending -> applied") == 5  # the full report once
    assert "the gates are open" not in err and "no NVIDIA GPU seen" not in err  # notes are not repeated
    assert lines[-2:] == [
        "demo ok: sglang 0.5.11 patched, verified, re-applied as a no-op and reverted; its 3 files match their "
        "RECORD hashes again",
        "On the GPU host, in the environment that serves sglang: `sm120patch apply`, then `sm120patch doctor --tp "
        "N` and `sm120patch bench kernel --tp N` (pipx: add --python /path/to/env/bin/python).",
    ]
    assert list(scratch_tmp.iterdir()) == []  # the scratch directory is gone


def test_demo_of_another_release_keeps_the_scratch_directory_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scratch_tmp: Path
) -> None:
    monkeypatch.setenv("SM120PATCH_WHEEL_CACHE", str(tmp_path / "cache"))
    pip = use_pip(monkeypatch, FakePip(mini_wheel(tmp_path), "sglang-0.5.11-py3-none-any.whl"))
    code, _, err = run("demo", "--sglang-version", "0.5.11", "--keep")
    assert code == 0, err
    assert pip.calls[0][0][-1] == "sglang==0.5.11"
    (scratch,) = scratch_tmp.iterdir()
    assert err.splitlines()[-1] == f"scratch directory kept: {scratch}"
    assert (scratch / "site-packages" / "sglang" / COMM).read_text() == (
        tmp_path / "wheel-site/sglang" / COMM
    ).read_text()


def test_a_given_wheel_is_used_and_nothing_is_downloaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scratch_tmp: Path
) -> None:
    pip = use_pip(monkeypatch, FakePip(None))
    wheel = mini_wheel(tmp_path, "sglang-0.5.11-given.whl")
    code, _, err = run("demo", "--wheel", str(wheel))
    assert code == 0 and pip.calls == [], err
    assert err.startswith("sm120patch demo: sglang-0.5.11-given.whl unpacked into ")
    assert list(scratch_tmp.iterdir()) == []


def test_a_refused_release_stops_the_demo_after_the_report_that_says_why(tmp_path: Path, scratch_tmp: Path) -> None:
    """The steps after a refused apply would fail for the same reason, and FlashInfer's
    kernel is moot on a release with nothing to widen: the report, then one line (it ended
    "demo failed: failed: apply, verify, ..." after a FlashInfer warning)."""
    site = write_mini_sglang(tmp_path / "site").parent
    utils = site / "sglang" / "srt/utils/common.py"  # no SM12x probe: a release sm120patch refuses
    utils.write_text(utils.read_text().replace("def is_sm120_supported", "def _gone"))
    code, _, err = run("demo", "--wheel", str(wheel_of(site, tmp_path / "sglang-0.5.11-py3-none-any.whl")))
    assert code == 1, err
    lines = err.splitlines()
    assert any(line.startswith("[release-refused] sglang 0.5.11 has no SM12x probe") for line in lines)
    assert not [line for line in lines if "FAILED" in line or "FlashInfer" in line or "failed: failed" in line]
    assert lines[-2].strip("─ ") == "result"  # the rule before the verdict
    assert lines[-1] == (
        "demo stopped: sm120patch refuses sglang 0.5.11 (above), so there is no cycle to show; "
        "`sm120patch demo` alone runs it on sglang 0.5.9"
    )
    assert list(scratch_tmp.iterdir()) == []


def test_a_release_whose_files_differ_from_its_record_fails_the_demo(tmp_path: Path, scratch_tmp: Path) -> None:
    """The cycle works, but the files it ends with are not the release's (RECORD)."""
    site = write_mini_sglang(tmp_path / "site").parent
    comm = site / "sglang" / COMM
    comm.write_text(comm.read_text() + "# changed after the RECORD was written\n")
    code, _, err = run("demo", "--wheel", str(wheel_of(site, tmp_path / "sglang-0.5.11-py3-none-any.whl")))
    assert code == 1, err
    assert "ok sm120patch revert: restored 3 files" in err
    assert err.splitlines()[-1] == f"demo failed: not as released (RECORD): sglang/{COMM}"


# --- what a wheel that cannot be read says ------------------------------------------------------


def test_a_file_that_is_no_zip_is_one_sentence_and_given_wheels_are_not_called_cached(tmp_path: Path) -> None:
    wheel = tmp_path / "sglang-0.5.11-py3-none-any.whl"
    wheel.write_text("<html>404</html>")  # what a proxy answered instead of the wheel
    with pytest.raises(EnvironmentProblem) as error:
        demo.install_wheel(wheel, tmp_path / "site")
    assert str(error.value) == f"--wheel {wheel}: not a readable wheel (File is not a zip file)"
    assert error.value.code == "download"
    with pytest.raises(EnvironmentProblem) as error:
        demo.install_wheel(wheel, tmp_path / "site", cached=True)
    assert error.value.code == "download"
    assert str(error.value) == (
        f"the cached wheel {wheel} is corrupt (File is not a zip file); delete it (rm '{wheel}') and run "
        "`sm120patch demo` again to download it afresh"
    )


def test_an_os_error_names_the_os_reason(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentProblem) as error:
        demo.install_wheel(tmp_path, tmp_path / "site")  # a directory, not a file
    assert str(error.value) == f"--wheel {tmp_path}: not a readable wheel (Is a directory)"


def test_an_error_without_words_is_named_by_its_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def cut_short(*args: object, **kwargs: object) -> None:
        """Fake ``zipfile.ZipFile``: a zip cut short, as zlib's reader reports it (a bare EOFError)."""
        raise EOFError

    monkeypatch.setattr(demo.zipfile, "ZipFile", cut_short)
    with pytest.raises(EnvironmentProblem) as error:
        demo.install_wheel(tmp_path / "w.whl", tmp_path / "site")
    assert str(error.value) == f"--wheel {tmp_path / 'w.whl'}: not a readable wheel (EOFError)"


# --- on a colour terminal -------------------------------------------------------------------------


@pytest.fixture
def colour(monkeypatch: pytest.MonkeyPatch) -> None:
    """A colour terminal as rich sees one: FORCE_COLOR, an xterm, NO_COLOR unset."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm")


def test_on_a_colour_terminal_only_the_verdict_words_are_coloured(
    tmp_path: Path, scratch_tmp: Path, colour: None
) -> None:
    """rich's highlighter would colour every number and path in these lines (versions, counts,
    the --python hint); the demo colours its verdict words and nothing else."""
    code, _, err = run("demo", "--wheel", str(mini_wheel(tmp_path)))
    assert code == 0, err
    assert "\x1b[" in err  # colour is on
    for plain in (
        "sm120patch revert: restored 3 files",
        "[kernel-missing] FlashInfer is not installed here; sglang 0.5.11 pins",
        ": sglang 0.5.11 patched, verified, re-applied as a no-op and reverted; its 3 files match",
        "(pipx: add --python /path/to/env/bin/python).",
    ):
        assert plain in err, plain


def test_on_a_colour_terminal_the_verdict_words_have_their_colours(
    tmp_path: Path, scratch_tmp: Path, colour: None
) -> None:
    """Green for what passed, yellow for what to read, the demo's name in bold (escape codes
    of an 8-colour xterm: 1 bold, 32 green, 33 yellow)."""
    code, _, err = run("demo", "--wheel", str(mini_wheel(tmp_path)))
    assert code == 0, err
    assert err.startswith("\x1b[1msm120patch demo\x1b[0m: sglang-0.5.11-py3-none-any.whl unpacked into ")
    assert "\n\x1b[32mok\x1b[0m sm120patch verify: all patches applied\n" in err
    assert "\n\x1b[1;33mwarning: \x1b[0m\x1b[33m[kernel-missing] FlashInfer is not installed here; " in err
    assert "\n\x1b[1;32mdemo ok\x1b[0m: sglang 0.5.11 patched, verified, re-applied as a no-op" in err


def test_on_a_colour_terminal_what_failed_is_bold_red(tmp_path: Path, scratch_tmp: Path, colour: None) -> None:
    """A release sm120patch refuses (no SM12x probe): the line that stops the demo in bold
    red (escape code 1;31)."""
    site = write_mini_sglang(tmp_path / "site").parent
    utils = site / "sglang" / "srt/utils/common.py"
    utils.write_text(utils.read_text().replace("def is_sm120_supported", "def _gone"))
    code, _, err = run("demo", "--wheel", str(wheel_of(site, tmp_path / "sglang-0.5.11-py3-none-any.whl")))
    assert code == 1, err
    assert "\n\x1b[1;31mdemo stopped\x1b[0m: sm120patch refuses sglang 0.5.11 (above)" in err


def test_on_a_colour_terminal_the_files_that_differ_are_plain(tmp_path: Path, scratch_tmp: Path, colour: None) -> None:
    site = write_mini_sglang(tmp_path / "site").parent
    for rel in (COMM, SERVER_ARGS):
        (site / "sglang" / rel).write_text((site / "sglang" / rel).read_text() + "# changed after the RECORD\n")
    code, _, err = run("demo", "--wheel", str(wheel_of(site, tmp_path / "sglang-0.5.11-py3-none-any.whl")))
    assert code == 1, err
    assert f": not as released (RECORD): sglang/{COMM}, sglang/{SERVER_ARGS}" in err


def test_a_failed_cycle_names_the_failed_steps_and_compares_no_files(
    tmp_path: Path, scratch_tmp: Path, colour: None
) -> None:
    """A gate renamed by hand after the RECORD was written (drift): what failed is the cycle;
    its files were never written, so they are not blamed on it.  On a colour terminal each
    step that failed and the verdict are in bold red (escape code 1;31)."""
    site = write_mini_sglang(tmp_path / "site").parent
    comm = site / "sglang" / COMM
    comm.write_text(comm.read_text().replace("def apply_flashinfer_allreduce_fusion(", "def fusion_allowed("))
    code, _, err = run("demo", "--wheel", str(wheel_of(site, tmp_path / "sglang-0.5.11-py3-none-any.whl")))
    assert code == 1, err
    assert "\n\x1b[1;31mFAILED\x1b[0m sm120patch verify: " in err
    assert "\n\x1b[1;31mdemo failed\x1b[0m in apply, verify, " in err
    lines = ANSI.sub("", err).splitlines()
    assert lines[-1] == "demo failed in apply, verify, apply again (must change nothing), revert"
    marks = [line.partition(":")[0] for line in lines if line.startswith(("ok ", "FAILED "))]
    assert marks == [
        "FAILED sm120patch verify",
        "FAILED sm120patch apply again (must change nothing)",
        "FAILED sm120patch revert",
    ]


def test_a_refused_release_of_no_known_version_says_so(tmp_path: Path) -> None:
    """Where the tree names no version, the line that stops the demo says it is unknown."""
    shown = io.StringIO()
    assert demo._refused(Console(file=shown, width=200), None) == 1
    assert "sm120patch refuses sglang (unknown version) (above)" in shown.getvalue()


def test_a_scratch_folder_that_cannot_be_removed_does_not_change_the_result(
    tmp_path: Path, scratch_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    removed: list[Path] = []

    def refusing_rmtree(path: Path, ignore_errors: bool = False) -> None:
        """Fake ``shutil.rmtree`` on a filesystem that refuses the removal (a busy mount):
        as the real one, it raises unless told to ignore errors."""
        removed.append(Path(path))
        if not ignore_errors:
            raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(demo.shutil, "rmtree", refusing_rmtree)
    code, _, err = run("demo", "--wheel", str(mini_wheel(tmp_path)))
    assert code == 0, err
    assert [p.parent for p in removed] == [scratch_tmp]


def test_without_pip_the_demo_says_so_and_names_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A uv venv has no pip: "No module named pip" alone left the user without the way round
    it, a wheel downloaded elsewhere (``--wheel``)."""
    monkeypatch.setenv("SM120PATCH_WHEEL_CACHE", str(tmp_path))
    use_pip(monkeypatch, FakePip(None, returncode=1, stderr="/venv/bin/python3: No module named pip\n"))
    code, _, err = run("demo")
    assert code == 2, err
    assert " ".join(err.split()) == (
        "error: [download] "
        f"could not download sglang==0.5.9: {sys.executable} has no pip (a uv venv has none unless asked); "
        "download it where pip works (`pip download --no-deps sglang==0.5.9`) and give it: "
        "`sm120patch demo --wheel FILE`"
    )
