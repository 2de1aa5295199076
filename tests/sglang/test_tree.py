"""locate.tree: sglang found through a serving interpreter's probe (``--python``), in this
interpreter, by ``--sglang-path``; a checkout's version; the RECORD an install offers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sm120patch.errors import EnvironmentProblem
from sm120patch.runner.locate import (
    locate,
    run_probe,
)
from sm120patch.sglang import tree as tree_module
from sm120patch.sglang.tree import (
    InstallKind,
    SglangTree,
    checkout_version,
    from_directory,
    release_of,
)
from tests.support.mini_sglang import write_mini_sglang

ANSWER_KEYS = (
    "python",
    "python_version",
    "sys_path",
    "package_dir",
    "version",
    "dist_info",
    "direct_url",
    "flashinfer",
    "flashinfer_dir",
)


def probe_answer(**fields: Any) -> dict[str, Any]:
    """What ``find_sglang`` prints, every key present (None where it found nothing)."""
    answer: dict[str, Any] = dict.fromkeys(ANSWER_KEYS)
    answer.update(python="/srv/env/bin/python3.11", python_version="3.11.7", sys_path=["/srv/env/lib"])
    answer.update(fields)
    return answer


def fake_python(path: Path, stdout: str, *, exit_code: int = 0, stderr: str = "", sleep_s: float = 0) -> Path:
    """A fake serving interpreter at ``path``: asked to run the find_sglang probe (``python -c
    RUNNER .../find_sglang.py``), it prints ``stdout`` (and ``stderr``) and exits ``exit_code``;
    asked anything else, it fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"#!{sys.executable}\n"
        '"""Fake serving interpreter (sm120patch tests): a fixed answer to the find_sglang probe."""\n'
        "import sys, time\n"
        "if sys.argv[1:2] != ['-c'] or not sys.argv[3].endswith('find_sglang.py'):\n"
        "    sys.exit('unexpected command: ' + ' '.join(sys.argv[1:]))\n"
        f"time.sleep({sleep_s})\n"
        f"sys.stdout.write({stdout!r})\n"
        f"sys.stderr.write({stderr!r})\n"
        f"sys.exit({exit_code})\n"
    )
    path.chmod(0o755)
    return path


def fake_git(bin_dir: Path, package_dir: Path, stdout: str, exit_code: int = 0) -> None:
    """A fake ``git`` first on PATH, standing in for the checkout's git: it answers exactly
    ``git -C PACKAGE_DIR describe --tags --match 'v[0-9]*'`` with ``stdout``; anything else fails."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    git = bin_dir / "git"
    git.write_text(
        "#!/bin/sh\n"
        "# fake git (sm120patch tests): one fixed answer to git describe\n"
        f'if [ $# -eq 6 ] && [ "$1" = -C ] && [ "$2" = "{package_dir}" ] && [ "$3" = describe ] '
        '&& [ "$4" = --tags ] && [ "$5" = --match ] && [ "$6" = \'v[0-9]*\' ]; then\n'
        f"  printf '%s\\n' '{stdout}'\n"
        f"  exit {exit_code}\n"
        "fi\n"
        "echo 'fatal: unexpected git command' >&2\nexit 129\n"
    )
    git.chmod(0o755)


# --- release_of / same_release --------------------------------------------------------------


def test_release_of_drops_the_local_label() -> None:
    assert release_of("0.5.23+14.gdeadbee") == "0.5.23"
    assert release_of("0.5.9") == "0.5.9"
    assert release_of("not a version") == "not a version"
    assert release_of(None) is None


def test_a_checkout_past_a_tag_is_the_same_release_as_the_tag(mini: Path) -> None:
    tree = from_directory(mini)
    assert tree.same_release("0.5.11+3.gabc1234")
    assert not tree.same_release("0.5.12")
    assert not tree.same_release(None)


# --- run_probe: the serving interpreter ----------------------------------------------------


@pytest.mark.offline
def test_run_probe_returns_what_the_interpreter_answered(tmp_path: Path) -> None:
    answer = probe_answer(package_dir="/srv/env/lib/sglang", version="0.5.9")
    python = fake_python(tmp_path / "env" / "bin" / "python", json.dumps(answer))
    assert run_probe(str(python)) == answer


@pytest.mark.offline
def test_an_env_root_stands_for_its_interpreter(tmp_path: Path) -> None:
    posix = probe_answer(version="posix")
    fake_python(tmp_path / "venv" / "bin" / "python", json.dumps(posix))
    assert run_probe(str(tmp_path / "venv")) == posix
    windows = probe_answer(version="windows")
    fake_python(tmp_path / "winenv" / "Scripts" / "python.exe", json.dumps(windows))
    assert run_probe(str(tmp_path / "winenv")) == windows


def test_a_missing_interpreter_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "bin" / "python"
    with pytest.raises(EnvironmentProblem) as info:
        run_probe(str(missing))
    assert str(info.value) == f"--python {missing}: no such interpreter"


@pytest.mark.offline
def test_an_interpreter_that_fails_is_reported_with_its_last_line(tmp_path: Path) -> None:
    """A non-zero exit is a failure even when a JSON object came out first."""
    python = fake_python(
        tmp_path / "python", json.dumps(probe_answer()), exit_code=1, stderr="Traceback ...\nRuntimeError: boom\n"
    )
    with pytest.raises(EnvironmentProblem) as info:
        run_probe(str(python))
    assert str(info.value) == f"--python {python}: {python} could not look for sglang: RuntimeError: boom"


NOT_UNDERSTOOD = "the answer of {python} was not understood (not find_sglang's JSON); its first line: "


@pytest.mark.parametrize(
    ("stdout", "first"),
    [
        ("Python 2.7 is not supported\nbye\n", "Python 2.7 is not supported"),
        ("", "(nothing on stdout)"),
        ("[1, 2]", "[1, 2]"),
        ("{}", "{}"),  # read as "no sglang" before, with "Searched sys.path: (empty)"
        (json.dumps(probe_answer(sys_path="/srv")), json.dumps(probe_answer(sys_path="/srv"))[:200]),
        (json.dumps(probe_answer(package_dir=7)), json.dumps(probe_answer(package_dir=7))[:200]),
        (json.dumps(probe_answer(sys_path=["/srv", 7])), json.dumps(probe_answer(sys_path=["/srv", 7]))[:200]),
    ],
    ids=[
        "text",
        "nothing",
        "a-list",
        "an-empty-object",
        "sys-path-a-string",
        "package-dir-a-number",
        "a-number-in-sys-path",
    ],
)
@pytest.mark.offline
def test_an_answer_that_is_not_understood_says_so_with_its_first_line(tmp_path: Path, stdout: str, first: str) -> None:
    python = fake_python(tmp_path / "python", stdout)
    with pytest.raises(EnvironmentProblem) as info:
        locate(python=str(python))
    assert str(info.value) == f"--python {python}: " + NOT_UNDERSTOOD.format(python=python) + first


@pytest.mark.offline
def test_an_interpreter_past_its_time_limit_is_given_up(tmp_path: Path) -> None:
    python = fake_python(tmp_path / "python", json.dumps(probe_answer()), sleep_s=2)
    with pytest.raises(EnvironmentProblem) as info:
        locate(python=str(python), timeout=0.2)
    assert str(info.value) == (
        f"--python {python}: {python} did not look for sglang within 0.2 s (--timeout raises the limit)"
    )


# --- locate ---------------------------------------------------------------------------------


@pytest.mark.offline
def test_locate_through_python_builds_the_tree_from_the_probe_answer(tmp_path: Path) -> None:
    package, dist, flashinfer = tmp_path / "src" / "sglang", tmp_path / "sglang-0.5.9.dist-info", tmp_path / "fi"
    package.mkdir(parents=True)
    (package / "__init__.py").touch()
    answer = probe_answer(
        package_dir=str(package),
        version="0.5.9",
        dist_info=str(dist),
        direct_url={"url": package.parent.as_uri(), "dir_info": {"editable": True}},
        flashinfer="0.6.17",
        flashinfer_dir=str(flashinfer),
    )
    python = fake_python(tmp_path / "python", json.dumps(answer))
    assert locate(python=str(python)) == SglangTree(
        package_dir=package,
        version="0.5.9",
        install_kind=InstallKind.EDITABLE,
        dist_info=dist,
        how_found=f"--python {python}",
        python="/srv/env/bin/python3.11",
        flashinfer="0.6.17",
        flashinfer_dir=flashinfer,
    )


@pytest.mark.parametrize("dist_info", ["sglang-0.5.9.dist-info", None])
@pytest.mark.offline
def test_without_a_version_from_a_distribution_the_trees_own_is_read_as_sglang_path_reads_it(
    tmp_path: Path, dist_info: str | None
) -> None:
    package = tmp_path / "sglang"
    package.mkdir()
    (package / "__init__.py").touch()
    (package / "version.py").write_text('__version__ = "0.5.13"\n')
    dist = tmp_path / dist_info if dist_info else None
    answer = probe_answer(package_dir=str(package), dist_info=dist and str(dist), version=None)
    python = fake_python(tmp_path / "python", json.dumps(answer))
    assert locate(python=str(python)).version == "0.5.13"


@pytest.mark.parametrize(
    ("dist_info", "kind"),
    [("sglang-0.5.9.dist-info", InstallKind.WHEEL), (None, InstallKind.PATH)],
    ids=["wheel", "bare package"],
)
@pytest.mark.offline
def test_locate_through_python_tells_a_wheel_from_a_bare_package(
    tmp_path: Path, dist_info: str | None, kind: InstallKind
) -> None:
    package = tmp_path / "sglang"
    package.mkdir()
    (package / "__init__.py").touch()
    dist = tmp_path / dist_info if dist_info else None
    answer = probe_answer(package_dir=str(package), dist_info=dist and str(dist))
    python = fake_python(tmp_path / "python", json.dumps(answer))
    assert locate(python=str(python)) == SglangTree(
        package, None, kind, dist, how_found=f"--python {python}", python="/srv/env/bin/python3.11"
    )


@pytest.mark.offline
def test_locate_runs_the_real_probe_in_another_interpreter(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This interpreter as the serving one, the miniature release on its PYTHONPATH."""
    monkeypatch.setenv("PYTHONPATH", str(mini.parent))
    assert locate(python=sys.executable) == SglangTree(
        mini.resolve(),
        "0.5.11",
        InstallKind.WHEEL,
        mini.parent.resolve() / "sglang-0.5.11.dist-info",
        how_found=f"--python {sys.executable}",
        python=sys.executable,
    )


def test_locate_in_this_interpreter(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(mini.parent))
    tree = locate()
    assert tree == SglangTree(
        mini.resolve(),
        "0.5.11",
        InstallKind.WHEEL,
        mini.parent / "sglang-0.5.11.dist-info",
        how_found=f"this interpreter ({sys.executable})",
        python=sys.executable,
    )
    assert tree.record.sha256("__init__.py") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@pytest.mark.offline
def test_no_sglang_says_which_sys_path_was_searched(tmp_path: Path) -> None:
    answer = probe_answer(sys_path=["/srv/env/lib/python3.11/site-packages", "/usr/lib/python311.zip"])
    python = fake_python(tmp_path / "python", json.dumps(answer))
    with pytest.raises(EnvironmentProblem) as info:
        locate(python=str(python))
    assert str(info.value) == (
        f"no sglang found in --python {python}.\nSearched sys.path:\n"
        "  /srv/env/lib/python3.11/site-packages\n  /usr/lib/python311.zip\n"
        "Pass --python /path/to/the/serving/env/bin/python (e.g. when sm120patch runs from pipx), "
        "or --sglang-path DIR (the sglang package directory), or run "
        "`sm120patch demo` to try it on a downloaded release."
    )


@pytest.mark.offline
def test_no_sglang_and_no_sys_path_says_so(tmp_path: Path) -> None:
    python = fake_python(tmp_path / "python", json.dumps(probe_answer(sys_path=[])))
    with pytest.raises(EnvironmentProblem) as info:
        locate(python=str(python))
    assert str(info.value).startswith(f"no sglang found in --python {python}.\nSearched sys.path:\n  (empty)\nPass ")


@pytest.mark.offline
def test_a_package_dir_that_cannot_be_read_is_refused(tmp_path: Path) -> None:
    gone = tmp_path / "gone" / "sglang"
    python = fake_python(tmp_path / "python", json.dumps(probe_answer(package_dir=str(gone))))
    with pytest.raises(EnvironmentProblem) as info:
        locate(python=str(python))
    assert str(info.value) == f"{gone}: not readable"


def test_python_and_sglang_path_together_are_refused(mini: Path) -> None:
    with pytest.raises(EnvironmentProblem) as info:
        locate(python=sys.executable, sglang_path=mini)
    assert str(info.value) == "give either --python or --sglang-path, not both"


# --- checkout_version -----------------------------------------------------------------------


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout's ``python/sglang`` without version files, with no git on PATH."""
    package = tmp_path / "sglang-src" / "python" / "sglang"
    package.mkdir(parents=True)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    return package


def test_the_setuptools_scm_file_comes_first_then_version_py_then_pyproject(checkout: Path) -> None:
    (checkout / "_version.py").write_text("__version__ = version = '0.5.24.dev3+gabc1234'\n")
    (checkout / "version.py").write_text('__version__ = "0.5.23"\n')
    (checkout.parent / "pyproject.toml").write_text('[project]\nname = "sglang"\nversion = "0.5.22"\n')
    assert checkout_version(checkout) == "0.5.24.dev3+gabc1234"
    (checkout / "_version.py").unlink()
    assert checkout_version(checkout) == "0.5.23"
    (checkout / "version.py").write_text("from importlib.metadata import version\n")  # no literal
    assert checkout_version(checkout) == "0.5.22"


def test_a_version_py_alone_gives_the_version(checkout: Path) -> None:
    (checkout / "version.py").write_text('# sglang\n__version__ = "0.5.9"\n')
    assert checkout_version(checkout) == "0.5.9"


@pytest.mark.parametrize(
    ("described", "version"),
    [
        ("v0.5.23", "0.5.23"),
        ("v0.5.23-14-gdeadbee", "0.5.23+14.gdeadbee"),
        ("v0.5.23-0-gdeadbee", "0.5.23"),  # --long spelling of the tag itself
        ("0.5.3.post1-2-gabc1234", "0.5.3.post1+2.gabc1234"),
        ("nightly-3-gabc1234", None),
    ],
    ids=["v0.5.23", "v0.5.23-14-gdeadbee", "v0.5.23-0-gdeadbee", "0.5.3.post1-2-gabc1234", "nightly-3-gabc1234"],
)
@pytest.mark.offline
def test_without_a_version_file_git_describe_gives_it(
    checkout: Path, tmp_path: Path, described: str, version: str | None
) -> None:
    fake_git(tmp_path / "bin", checkout, described)
    assert checkout_version(checkout) == version


@pytest.mark.offline
def test_a_failing_git_describe_is_not_trusted(checkout: Path, tmp_path: Path) -> None:
    fake_git(tmp_path / "bin", checkout, "v0.5.23", exit_code=128)
    assert checkout_version(checkout) is None


@pytest.mark.offline
def test_without_git_there_is_no_version(checkout: Path) -> None:
    assert checkout_version(checkout) is None


def test_a_hanging_git_is_given_up(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def hanging_git(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """Stands in for ``subprocess.run`` of a git that never answers."""
        if kwargs.get("timeout") is None:
            raise AssertionError(f"{args} would hang without a time limit")
        raise subprocess.TimeoutExpired(args, kwargs["timeout"])

    monkeypatch.setattr(tree_module.subprocess, "run", hanging_git)
    assert checkout_version(checkout) is None


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.offline
def test_a_real_git_checkout_past_a_lightweight_tag(tmp_path: Path) -> None:
    repo = tmp_path / "sglang-src"
    package = repo / "python" / "sglang"
    package.mkdir(parents=True)
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(repo), *ident, *args], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    git("init", "-q")
    git("commit", "-q", "--allow-empty", "-m", "one")
    git("tag", "v0.5.23")
    git("commit", "-q", "--allow-empty", "-m", "two")
    sha = git("rev-parse", "--short", "HEAD")
    assert checkout_version(package) == f"0.5.23+1.g{sha}"


# --- from_directory (--sglang-path) ---------------------------------------------------------


@pytest.mark.parametrize("given", ["site", "site/sglang"])
def test_sglang_path_reads_the_install_beside_the_package(tmp_path: Path, mini: Path, given: str) -> None:
    directory = tmp_path / given
    assert from_directory(directory) == SglangTree(
        mini.resolve(),
        "0.5.11",
        InstallKind.WHEEL,
        mini.parent.resolve() / "sglang-0.5.11.dist-info",
        how_found=f"--sglang-path {directory}",
    )


def test_sglang_path_takes_the_newest_of_several_dist_infos(tmp_path: Path) -> None:
    site = tmp_path / "site"
    package = write_mini_sglang(site, "0.5.9")
    write_mini_sglang(site, "0.5.11")
    os.utime(site / "sglang-0.5.11.dist-info", (1_000_000, 1_000_000))  # the leftover of an older install
    tree = from_directory(package)
    assert (tree.version, tree.dist_info) == ("0.5.9", site / "sglang-0.5.9.dist-info")
    os.utime(site / "sglang-0.5.9.dist-info", (500_000, 500_000))
    tree = from_directory(package)
    assert (tree.version, tree.dist_info) == ("0.5.11", site / "sglang-0.5.11.dist-info")


def test_sglang_path_reads_the_name_in_metadata_not_the_folder_name(tmp_path: Path) -> None:
    site = tmp_path / "site"
    package = write_mini_sglang(site, "0.5.9")
    (site / "sglang-0.5.9.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: SGLang\nVersion: 0.5.9\n")
    other = site / "sglang-router-0.3.dist-info"  # another project whose folder name starts the same
    other.mkdir()
    (other / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang-router\nVersion: 0.3\n")
    (site / "sglang-9.dist-info").mkdir()  # no METADATA at all
    tree = from_directory(package)
    assert (tree.version, tree.dist_info, tree.install_kind) == (
        "0.5.9",
        site / "sglang-0.5.9.dist-info",
        InstallKind.WHEEL,
    )


@pytest.mark.offline
def test_metadata_fields_end_at_the_first_blank_line(tmp_path: Path) -> None:
    site = tmp_path / "site"
    package = write_mini_sglang(site, "0.5.9")
    (site / "sglang-0.5.9.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nname:  sglang \nVERSION: 0.5.9\n\nVersion: 9.9 (the description)\n"
    )
    assert from_directory(package).version == "0.5.9"
    (site / "sglang-0.5.9.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\n\nVersion: 9.9\n")
    assert from_directory(package).version is None  # the description is no header; no checkout either


def test_metadata_with_bytes_that_are_not_utf8_is_still_read(tmp_path: Path) -> None:
    """A METADATA written by an old tool in Latin-1 (an author's name): the fields around it read."""
    site = tmp_path / "site"
    package = write_mini_sglang(site, "0.5.9")
    (site / "sglang-0.5.9.dist-info" / "METADATA").write_bytes(
        b"Metadata-Version: 2.1\nName: sglang\nAuthor: Jos\xe9\nVersion: 0.5.9\n"
    )
    assert from_directory(package).version == "0.5.9"


def test_sglang_path_on_an_editable_install_is_editable(tmp_path: Path) -> None:
    site = tmp_path / "site"
    package = write_mini_sglang(site, "0.5.9")
    dist = site / "sglang-0.5.9.dist-info"
    (dist / "direct_url.json").write_text(json.dumps({"url": "file:///src", "dir_info": {"editable": True}}))
    assert from_directory(package).install_kind is InstallKind.EDITABLE
    (dist / "direct_url.json").write_text("{not json")
    assert from_directory(package).install_kind is InstallKind.WHEEL


def test_sglang_path_on_a_checkout_reads_its_version(checkout: Path) -> None:
    (checkout / "srt").mkdir()
    (checkout / "__init__.py").write_text("")
    (checkout.parent / "pyproject.toml").write_text('[project]\nname = "sglang"\nversion = "0.5.9"\n')
    tree = from_directory(checkout.parent)
    assert tree == SglangTree(
        checkout.resolve(), "0.5.9", InstallKind.PATH, None, how_found=f"--sglang-path {checkout.parent}"
    )
    assert tree.record.problem == "no install metadata (not installed from a wheel)"


def test_sglang_path_reads_the_flashinfer_beside_it(mini: Path) -> None:
    site = mini.parent
    (site / "flashinfer").mkdir()
    (site / "flashinfer" / "__init__.py").write_text("")
    for name, text in (
        ("flashinfer_python-0.6.17.dist-info", "Name: flashinfer-python\nVersion: 0.6.17\n"),
        ("flashinfer-0.2.0.dist-info", "Name: flashinfer\nVersion: 0.2.0\n"),
    ):
        (site / name).mkdir()
        (site / name / "METADATA").write_text(text)
    tree = from_directory(mini)
    assert (tree.flashinfer, tree.flashinfer_dir) == ("0.6.17", site.resolve() / "flashinfer")
    shutil.rmtree(site / "flashinfer_python-0.6.17.dist-info")
    assert from_directory(mini).flashinfer == "0.2.0"  # the older distribution name


def test_a_flashinfer_dist_info_without_a_version_is_passed_over(mini: Path) -> None:
    (mini.parent / "flashinfer_python-0.6.17.dist-info").mkdir()
    (mini.parent / "flashinfer_python-0.6.17.dist-info" / "METADATA").write_text("Name: flashinfer-python\n")
    (mini.parent / "flashinfer-0.2.0.dist-info").mkdir()
    (mini.parent / "flashinfer-0.2.0.dist-info" / "METADATA").write_text("Name: flashinfer\nVersion: 0.2.0\n")
    assert from_directory(mini).flashinfer == "0.2.0"


def test_sglang_path_that_is_no_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentProblem) as info:
        from_directory(tmp_path / "nope")
    assert str(info.value) == f"--sglang-path {tmp_path / 'nope'}: not a directory"


def test_sglang_path_on_another_package_says_which_it_is(mini: Path) -> None:
    hint = (
        "; pass the 'sglang' directory that holds srt/ (site-packages/sglang, "
        "or a checkout's python/sglang) or the directory above it"
    )
    srt = mini / "srt"
    with pytest.raises(EnvironmentProblem) as info:
        from_directory(srt)
    assert str(info.value) == f"--sglang-path {srt}: not an sglang package (it is the package 'srt'){hint}"
    empty = mini.parent / "empty"
    empty.mkdir()
    with pytest.raises(EnvironmentProblem) as info:
        from_directory(empty)
    assert str(info.value) == f"--sglang-path {empty}: not an sglang package{hint}"


def test_an_sglang_folder_without_srt_is_no_sglang_package(mini: Path) -> None:
    shutil.rmtree(mini / "srt")
    with pytest.raises(EnvironmentProblem) as info:
        from_directory(mini)
    assert str(info.value).startswith(f"--sglang-path {mini}: not an sglang package (it is the package 'sglang'); ")


# --- SglangTree.record ----------------------------------------------------------------------


def test_the_record_of_a_wheel_gives_the_pristine_hashes(mini: Path) -> None:
    record = from_directory(mini).record
    assert (record.prefix, record.problem) == ("sglang/", None)
    assert record.sha256("__init__.py") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_the_record_is_found_through_a_symlinked_site(tmp_path: Path, mini: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(mini.parent)
    tree = SglangTree(mini, "0.5.11", InstallKind.WHEEL, link / "sglang-0.5.11.dist-info", how_found="test")
    assert tree.record.prefix == "sglang/"


def test_an_editable_install_has_no_record_of_the_checkout(mini: Path) -> None:
    dist = mini.parent / "sglang-0.5.11.dist-info"
    tree = SglangTree(mini, "0.5.11", InstallKind.EDITABLE, dist, how_found="test")
    assert (tree.record.prefix, tree.record.text) == (None, "")
    assert tree.record.problem == "an editable install: its RECORD does not list the checkout's files"


def test_a_missing_record_turns_the_pristine_check_off(mini: Path) -> None:
    dist = mini.parent / "sglang-0.5.11.dist-info"
    (dist / "RECORD").unlink()
    tree = SglangTree(mini, "0.5.11", InstallKind.WHEEL, dist, how_found="test")
    assert tree.record.problem == (
        f"cannot read {dist / 'RECORD'} (No such file or directory): the pristine check is off"
    )
    assert tree.record.sha256("__init__.py") is None


def test_a_record_of_other_files_turns_the_pristine_check_off(mini: Path, tmp_path: Path) -> None:
    dist = mini.parent / "sglang-0.5.11.dist-info"
    (dist / "RECORD").write_text("sglang/__init__.pyc,,\nother/__init__.py,,\n")
    tree = SglangTree(mini, "0.5.11", InstallKind.WHEEL, dist, how_found="test")
    assert tree.record.problem == f"{dist / 'RECORD'} lists no file of {mini}: the pristine check is off"
    elsewhere = SglangTree(tmp_path / "elsewhere" / "sglang", "0.5.11", InstallKind.WHEEL, dist, how_found="test")
    assert elsewhere.record.prefix is None
