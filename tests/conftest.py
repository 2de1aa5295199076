"""Fixtures every test folder shares: real releases, the miniature release, the full cycle.

Helpers that are functions, not fixtures (running the CLI, fakes, the independent ``ast``
comparison), live in ``tests/support``.
"""

from __future__ import annotations

import compileall
import functools
import gc
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import libcst
import pytest

from sm120patch.patcher.commands.demo import cache_root
from sm120patch.sglang.layout import ADD_NORM, COMM_FUSION, COMMUNICATOR, OVERRIDES, SERVER_ARGS
from tests.support import workers_python
from tests.support.mini_sglang import write_mini_sglang
from tests.support.realtrees import TREES, copy_release, record_hashes, run_cycle, sha256

# Rich must not colour or wrap what the tests read.
os.environ.setdefault("NO_COLOR", "1")
os.environ.setdefault("COLUMNS", "200")


TARGETS = (COMMUNICATOR, ADD_NORM, SERVER_ARGS, OVERRIDES, COMM_FUSION)

#: Where the fast tier keeps its scratch files when the machine has it: memory (tmpfs).
MEMORY_TMP = Path("/dev/shm")


#: The runs that touch no real release: the fast tier, and all that needs no network (the
#: fast tier with the tests marked ``offline``, as the mutation runs take it).
OFFLINE_RUNS = ("not slow", "not slow or offline")


def fast_tier(config: pytest.Config) -> bool:
    """Whether this run touches no real release (``-m "not slow"``, or with ``or offline``)."""
    return config.option.markexpr in OFFLINE_RUNS


def compile_rewritten_tests(config: pytest.Config) -> None:
    """The test modules as pytest rewrites them (for its assertion messages), compiled into
    its cache here, once, where that cache is missing or stale: on a fresh clone every
    pytest-xdist worker would otherwise rewrite all of them at the same time (about 3 s of
    CPU each); the package and the tests' helpers too.  Run by the process that starts the
    workers, before it starts them; pytest's own loader (the same functions) then finds the
    result and skips the work."""
    try:
        from _pytest.assertion import rewrite

        state = config.stash[rewrite.assertstate_key]
    except (ImportError, AttributeError, KeyError):  # another pytest: each worker rewrites, as before
        return
    if sys.dont_write_bytecode:
        return
    tests = Path(__file__).parent
    rewritten = re.compile(r"(^|/)(test_[^/]*|conftest)\.py$")  # what pytest rewrites here
    compileall.compile_dir(tests.parent / "sm120patch", quiet=1)
    compileall.compile_dir(tests, quiet=1, rx=rewritten)  # the others: rx names what to skip
    stale = []
    for source in sorted(p for p in tests.rglob("*.py") if rewritten.search(str(p))):
        cache = rewrite.get_cache_dir(source)
        pyc = cache / (source.name[:-3] + rewrite.PYC_TAIL)
        if rewrite._read_pyc(source, pyc) is None and rewrite.try_makedirs(cache):
            stale.append((source, pyc))

    def rewrite_each(sources: list[tuple[Path, Path]]) -> None:
        for source, pyc in sources:
            stat, code = rewrite._rewrite_test(source, config)
            rewrite._write_pyc(state, code, stat, pyc)

    # On a fresh clone that is about 6 s of CPU: shared out over the cores by forks of this
    # process (no thread runs yet), each writing its own share of the files.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    shares = min(cores, len(config.option.tx or [])) if hasattr(os, "fork") else 1
    children = []
    for share in range(1, shares if len(stale) > 10 else 1):
        pid = os.fork()
        if pid == 0:  # the child: its share, then gone without running any of pytest's exit code
            try:
                rewrite_each(stale[share::shares])
            finally:
                os._exit(0)
        children.append(pid)
    rewrite_each(stale[0 :: max(1, len(children) + 1)])
    for pid in children:
        os.waitpid(pid, 0)


#: What a GPU host has on PATH that the tests fake where they need it: the host's own would
#: answer for its GPUs (every "no GPU here" expectation fails) and start a process.
GPU_TOOLS = ("nvidia-smi",)


def hide_gpu_tools(cleanups: Callable[[Callable[[], object]], None]) -> None:
    """``PATH`` without the host's own ``GPU_TOOLS``: a folder that holds one (``/usr/bin`` on
    a GPU host) is replaced by a folder of links to everything else in it.  The processes the
    tests start inherit it; a test's fake, put first on ``PATH``, is still found."""
    folders = os.environ.get("PATH", "").split(os.pathsep)
    holding = [k for k, folder in enumerate(folders) if folder and any(shutil.which(t, path=folder) for t in GPU_TOOLS)]
    if not holding:
        return
    root = Path(tempfile.mkdtemp(prefix="sm120patch-path-"))
    cleanups(functools.partial(shutil.rmtree, root, ignore_errors=True))
    for k in holding:
        shadow = root / str(k)
        shadow.mkdir()
        for entry in os.scandir(folders[k]):
            if entry.name not in GPU_TOOLS:
                (shadow / entry.name).symlink_to(entry.path)
        folders[k] = str(shadow)
    os.environ["PATH"] = os.pathsep.join(folders)


def let_ctrl_c_through() -> None:
    """SIGINT handled as Python does by default when this run started with it ignored: a shell
    without job control starts a background job (``cmd &`` in a script, a mutation run left in
    the background) with SIGINT ignored, every process it starts inherits that, and the tests
    that press Ctrl-C on sm120patch (``interrupting_executable``) would see it ignored, as a
    user at a terminal never does."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config: pytest.Config) -> None:
    """The fast tier's scratch folders (``tmp_path``, and every temporary folder of the
    processes it starts) in memory where there is a tmpfs: it writes and fsyncs thousands of
    small files, and each fsync on disk costs about half a millisecond.  The slow tier stays
    on disk: it hard-links the cached releases, which must be on the same filesystem.
    Under pytest-xdist (``-n N``) the test modules are compiled first
    (``compile_rewritten_tests``), and in a run with the ``offline`` tests the workers run
    this interpreter without its ``.pth`` code (tests/support/workers_python.py; ``--tx
    N*popen`` runs them as is).  Every run: the host's own nvidia-smi is off ``PATH``
    (``hide_gpu_tools``), and Ctrl-C reaches the processes the tests start
    (``let_ctrl_c_through``)."""
    hide_gpu_tools(config.add_cleanup)
    let_ctrl_c_through()
    starts_workers = bool(config.getoption("numprocesses", None)) and not hasattr(config, "workerinput")
    if starts_workers:
        compile_rewritten_tests(config)
    if not fast_tier(config):
        return
    if MEMORY_TMP.is_dir() and os.access(MEMORY_TMP, os.W_OK | os.X_OK):
        os.environ["TMPDIR"] = str(MEMORY_TMP)
        tempfile.tempdir = str(MEMORY_TMP)
    # Only where the tests start Pythons (``offline`` in the run): for two workers alone it
    # costs more than it saves.  -n N has just set config.option.tx to N * ["popen"].
    if starts_workers and os.name == "posix" and config.option.markexpr != OFFLINE_RUNS[0]:
        folder = Path(tempfile.mkdtemp(prefix="sm120patch-workers-python-"))
        config.add_cleanup(functools.partial(shutil.rmtree, folder, ignore_errors=True))
        python = workers_python.make(folder, workers_python.site_import_path())
        config.option.tx = [f"popen//python={python}"] * len(config.option.tx)
        os.environ[workers_python.CHOSEN] = str(python)  # the workers' own test checks they run it
        os.environ[workers_python.GIVEN] = sys.executable


def first_batches(total: int, workers: int) -> list[int]:
    """The sizes of the first batches pytest-xdist's worksteal scheduler hands out, in order:
    what is left, split evenly over the workers not yet served."""
    sizes: list[int] = []
    for served in range(workers):
        sizes.append((total - sum(sizes)) // (workers - served))
    return sizes


def spread_waiting(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """``items`` reordered so that each worker's first batch holds its share of the tests
    marked ``waits``, spread from a tenth to six tenths of that batch (each worker a little
    offset from the next): a worker that waits overlaps the others' CPU work, instead of
    several waiting at once, and the last tests of the run (the ones idle workers steal from
    the ends of the others' batches) are short."""
    waiting = [item for item in items if item.get_closest_marker("waits")]
    busy = iter([item for item in items if not item.get_closest_marker("waits")])
    order: list[pytest.Item] = []
    for worker, size in enumerate(first_batches(len(items), workers)):
        mine = waiting[worker::workers]
        batch = [next(busy) for _ in range(max(0, size - len(mine)))]
        start, spacing = 0.1 * len(batch), 0.5 * len(batch) / max(1, len(mine))
        for rank, item in enumerate(mine):  # ``+ rank``: the waiting tests inserted before it
            batch.insert(int(start + (rank + (worker + 0.5) / workers) * spacing) + rank, item)
        order += batch
    return order + list(busy)


@pytest.hookimpl(trylast=True)
def pytest_make_parametrize_id(config: pytest.Config, val: object, argname: str) -> str | None:
    """A table row's value as its case's name where pytest would only number it (``args0``):
    a command line's words, a patch's or an example's name; None leaves pytest's own id."""
    if isinstance(val, (list, tuple)) and val and all(isinstance(v, (str, int, float)) for v in val):
        return " ".join(map(str, val))[:60]
    for attribute in ("id", "name"):
        named = getattr(val, attribute, None)
        if isinstance(named, str) and named and not isinstance(val, (str, Path)):
            return named[:60]
    return None


def pytest_itemcollected(item: pytest.Item) -> None:
    """A test marked ``offline`` is a slow one: ``-m "not slow"`` leaves it out."""
    if item.get_closest_marker("offline") and not item.get_closest_marker("slow"):
        item.add_marker(pytest.mark.slow)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (after deselection): the waiting tests spread over the workers."""
    workers = getattr(config, "workerinput", {}).get("workercount", 0)
    if workers > 1:
        items[:] = spread_waiting(items, workers)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection built (every module, test and parameter) lives until the run ends:
    frozen, the garbage collector stops walking it in each full collection, and pytest's own
    five at the end of each worker (looking for unraisable exceptions) take milliseconds,
    not a second."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True, scope="session")
def parse_each_source_once(request: pytest.FixtureRequest) -> Iterator[None]:
    """In the fast tier, libcst parses each distinct source once per worker: its tests run
    the commands on the same miniature-release files thousands of times, and a parse is a
    pure function whose result is immutable (libcst's nodes are frozen; changes make new
    trees), so sharing it changes nothing the tests see.  A source that does not parse is
    parsed again each time (its ``ParserSyntaxError`` is raised as before).  Real releases
    (the slow tier) are not kept: their trees are large."""
    if not fast_tier(request.config):
        yield
        return
    real = libcst.parse_module
    cached = functools.lru_cache(maxsize=128)(real)

    def parse_module(source: str | bytes, *config: object, **options: object) -> libcst.Module:
        return real(source, *config, **options) if config or options else cached(source)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(libcst, "parse_module", parse_module)
        yield


#: Programs a library runs once per host to fill a cache of its own, whichever test first
#: needs it: matplotlib lists the fonts with fontconfig's ``fc-list`` where it has no font cache.
HOST_CACHES = ("fc-list",)


@pytest.fixture(autouse=True)
def fast_tests_start_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fast test that starts a process fails, naming it: each Python started costs about a
    quarter second of CPU here, and the fast tier stays fast only while it starts none.  The
    process is still started (code under test may turn a refusal into an answer), and the
    test fails at its end.  Mark it ``offline`` (the slow tier, no network).  ``HOST_CACHES``
    are let through."""
    if request.node.get_closest_marker("slow"):
        yield
        return
    started: list[str] = []

    def counted(real: Callable[..., Any], what: Callable[..., str]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            started.append(what(*args, **kwargs))
            return real(*args, **kwargs)

        return call

    def argv(popen: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> str:
        return " ".join(map(str, args)) if isinstance(args, (list, tuple)) else str(args)

    def counted_popen(*args: Any, **kwargs: Any) -> Any:
        words = argv(*args, **kwargs).split()
        if words and os.path.basename(words[0]) in HOST_CACHES:
            return real_popen(*args, **kwargs)
        return counting_popen(*args, **kwargs)

    real_popen = subprocess.Popen._execute_child  # type: ignore[attr-defined]
    counting_popen = counted(real_popen, argv)
    monkeypatch.setattr(subprocess.Popen, "_execute_child", counted_popen)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, counted(getattr(os, name), lambda *a, _n=name, **k: f"os.{_n}"))
    yield
    if started:
        pytest.fail(f"this fast test started {len(started)} process(es), first {started[0][:120]!r}: mark it offline")


@pytest.fixture(autouse=True)
def short_stop_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """The waits between SIGTERM and SIGKILL, shortened: the tests' hung processes ignore
    SIGTERM on purpose, and what is tested is that SIGKILL follows and nothing is left, not
    how long a real rank is given to exit."""
    from sm120patch import runner as probes
    from sm120patch.runner import ranks as launch

    monkeypatch.setattr(probes, "GRACE_S", 0.2)
    monkeypatch.setattr(launch, "KILL_GRACE_S", 0.3)


@pytest.fixture
def tmp_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytest's ``tmp_path`` (a new folder named after the test, under the run's base
    folder), made by one ``mkdtemp``: pytest's own lists the whole base folder to number each
    new one, and that folder grows with every test a worker runs (thousands here)."""
    name = re.sub(r"\W", "_", request.node.name)[:30]
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=tmp_path_factory.getbasetemp()))


@pytest.fixture
def release(tmp_path: Path) -> Callable[..., Path]:
    """``release("0.5.9")`` -> a private, pip-installed sglang package dir of that release."""
    counter = iter(range(1000))

    def make(version: str, hardlink: bool = True) -> Path:
        return copy_release(version, tmp_path / f"site-{next(counter)}", hardlink=hardlink)

    return make


@pytest.fixture
def mini(tmp_path: Path) -> Path:
    """The miniature release (tests/support/mini_sglang.py) in ``tmp_path/site``; its package dir."""
    return write_mini_sglang(tmp_path / "site")


@pytest.fixture(scope="session")
def release_cycle(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict]:
    """``release_cycle("0.5.9")`` -> what ``run_cycle`` (apply, verify, apply again, revert,
    each checked) found on a private copy of that release; run once per release and session,
    shared by the release-matrix rows of every patch."""
    found: dict[str, dict | AssertionError] = {}

    def cycle(version: str) -> dict:
        if version not in found:
            try:
                found[version] = run_cycle(copy_release(version, tmp_path_factory.mktemp(f"cycle-{version}")))
            except AssertionError as failure:
                found[version] = failure
        result = found[version]
        if isinstance(result, AssertionError):
            raise result
        return result

    return cycle


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The cached installs are shared by hard links: prove no test wrote into them in place
    (once, in the process that started the run: pytest-xdist's workers end before it).  The
    fast tier never touches them: no check, no second of hashing after its last test."""
    if fast_tier(session.config) or not TREES.is_dir() or hasattr(session.config, "workerinput"):
        return
    for site in TREES.iterdir():
        package = site / "sglang"
        if site.name.startswith(".") or not package.is_dir():
            continue
        record = record_hashes(package)
        for rel in TARGETS:
            if rel in record and sha256(package / rel) != record[rel]:
                raise AssertionError(f"cached tree {site} was modified in place: {rel}")


TORCH = "torch==2.13.0"  # the CPU build this machine kind keeps on disk (no GPU here)


@pytest.fixture(scope="session")
def cpu_torch_python() -> Path:
    """A cached venv with the real CPU build of torch: a serving interpreter without a GPU."""
    venv = cache_root() / "venvs" / "torch-2.13.0-cpu"
    python = venv / "bin" / "python"
    if not (venv / ".complete").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", TORCH], check=True
        )
        (venv / ".complete").touch()
    return python
