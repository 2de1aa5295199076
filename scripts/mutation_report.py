#!/usr/bin/env python3
"""Mutation testing with mutmut against the tests that need no network -> docs/mutation.md.

    pip install -e '.[mutation]'                              # mutmut, pinned
    python3 scripts/mutation_report.py                        # every module of the package
    python3 scripts/mutation_report.py sm120patch.patcher.plan.trust  # some modules (dotted names)
    python3 scripts/mutation_report.py --open                 # only what is not killed yet
    python3 scripts/mutation_report.py --together --children 16  # one mutmut run over every module
    python3 scripts/mutation_report.py --together --open      # after it: what is still not answered
    python3 scripts/mutation_report.py --together --open MODULE ...  # only those modules' survivors
    python3 scripts/mutation_report.py --together --since REV # no mutants/ here: keep REV's statuses
                                                              # of the functions unchanged since REV
    python3 scripts/mutation_report.py --render               # only rewrite the report

mutmut (configured in pyproject.toml, ``[tool.mutmut]``) copies the tree into ``mutants/``,
makes every mutant of the chosen module and runs the tests that cover each one (the fast
tier and the ``offline`` tests: ``-m "not slow or offline"``).
Each module's statuses are kept in ``docs/mutation/results.json``, so modules can be run
one at a time (a CI-sized step each) and the report still covers all of them.

Every mutant not killed (a survivor, or one no test reaches) must be answered: with a
test (then it is killed on the next run), or in ``docs/mutation/triage.toml`` as equivalent,
with why.  The score leaves the equivalent ones out: killed / (killed + not killed -
equivalent).  It is not part of ``.ci/run``: a full run takes longer than CI allows on two
cores; the report is checked in.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "docs" / "mutation" / "results.json"
TRIAGE = REPO / "docs" / "mutation" / "triage.toml"


def every_module() -> list[str]:
    """Each module of the package with code in it; not the remote scripts (``do_not_mutate``)."""
    package = REPO / "sm120patch"
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(REPO).with_suffix("")
        if (rel.parent.name == "remote" and rel.name != "__init__") or not path.read_text().strip():
            continue
        found.append(".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts))
    return found


#: mutmut hands pytest a mutant's tests as a set, in no order, so the unit test that kills a
#: mutant often ran after a minute of CLI tests that start processes.  Quickest first (by
#: mutmut's own timings of each test), a kill costs about a second; a survivor still runs all.
QUICKEST_TESTS_FIRST = """
from mutmut.__main__ import cli
from mutmut.runners.harness import PytestRunner
from mutmut.state import state

as_given = PytestRunner._pytest_args_regular_run
quickest = lambda tests: sorted(tests, key=lambda test: (state().duration_by_test.get(test, 0.0), test))
PytestRunner._pytest_args_regular_run = lambda self, tests: as_given(self, quickest(tests))
cli(prog_name="mutmut")
"""

#: mutmut in this interpreter (its console script may name another): the tests' processes run
#: ``sys.executable``, and that must be the interpreter the tests expect (one without torch).
#: Not ``-m mutmut``: its module would run twice, as ``__main__`` and as ``mutmut.__main__``.
MUTMUT = [sys.executable, "-c", QUICKEST_TESTS_FIRST]

#: Not killed: a survivor, or a mutant in code that no test runs.
MISSED = ("survived", "no tests")
LINE = re.compile(r"^\s*(?P<name>[\w.ǁ]+__mutmut_\d+): (?P<status>.+)$")


def statuses_now() -> dict[str, str]:
    """mutmut's own record of every mutant it has made (kept in ``mutants/`` between runs)."""
    results = subprocess.run([*MUTMUT, "results", "--all", "true"], cwd=REPO, capture_output=True, text=True)
    found = {}
    for line in results.stdout.splitlines():
        match = LINE.match(line)
        if match:
            found[match.group("name")] = match.group("status").strip()
    return found


def in_module(name: str, module: str) -> bool:
    """Whether mutant ``name`` is of ``module`` itself, not of a module under it (a package's
    ``__init__`` is named like the package): mutmut names a function ``x_f``, a method ``xǁCǁm``."""
    return name.startswith(module + ".") and name[len(module) + 1 :].startswith(("x_", "xǁ"))


def clear_leftovers() -> None:
    """Remove what mutants wrote into ``mutants/`` itself (a path joined without its folder
    lands in mutmut's working directory): a ``mutants/sglang`` left there is imported by the
    next run's tests, one fails, and mutmut stops with "failed to collect stats".  And its
    copy of ``tests/``: mutmut copies the tests over it, so a test file moved or removed since
    would still run there (twice, under its old name and its new)."""
    top = REPO / "mutants"
    if not top.is_dir():
        return
    shutil.rmtree(top / "tests", ignore_errors=True)
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    keep = {line.split("/", 1)[0] for line in tracked.splitlines()} | {"mutmut-stats.json", LINES.name}
    for entry in top.iterdir():
        if entry.name not in keep:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()


#: mutmut's own first step of ``mutmut run``: copy the tree into ``mutants/`` and make the
#: mutants of every function that changed since (mutmut 3, pinned in the ``mutation`` extra).
GENERATE = (
    "import mutmut.__main__ as m\n"
    "m.set_mutant_under_test('mutant_generation')\n"
    "m.makedirs(m.Path('mutants'), exist_ok=True)\n"
    "m.copy_src_dir(); m.copy_also_copy_files(); m.setup_source_paths(); m.create_mutants(2)\n"
)


def generate() -> None:
    made = subprocess.run([sys.executable, "-c", GENERATE], cwd=REPO, capture_output=True, text=True)
    if made.returncode != 0:
        sys.exit("mutmut could not make the mutants:\n" + "\n".join((made.stdout + made.stderr).splitlines()[-15:]))


def open_targets() -> dict[str, str]:
    """Every mutant not killed yet nor named equivalent in triage.toml.  A mutant killed once
    stays killed while the tests only grow; mutmut makes new mutants (status "not checked")
    for each function whose code changed -- but only when it runs, so they are made first:
    else a changed function reads as done.  A survivor triage.toml names as equivalent stays
    one: not run again (each costs every test that reaches it)."""
    generate()
    equivalent = load_triage()
    cache = load_lines()
    statuses = statuses_now()
    lines = changed_lines([name for name, status in statuses.items() if status == "survived"], cache)
    save_lines(cache)
    return {
        name: status
        for name, status in statuses.items()
        if status != "killed" and not (status == "survived" and triage_key(name, lines[name]) in equivalent)
    }


#: A status as mutmut records it: the exit code it reads back as that status.
EXIT_CODE_OF = {"killed": 1, "survived": 0, "no tests": 33, "skipped": 34, "suspicious": 35, "timeout": 36}


def metas(top: Path) -> dict[str, dict]:
    """Each mutated file under ``top/mutants`` (its path in the package) -> mutmut's record of it."""
    return {
        str(meta.relative_to(top / "mutants"))[: -len(".meta")]: json.loads(meta.read_text())
        for meta in (top / "mutants").rglob("*.py.meta")
    }


def module_of(path: str) -> str:
    rel = Path(path).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def seed_since(rev: str) -> int:
    """Start a fresh ``mutants/`` from the statuses recorded at ``rev``, as mutmut itself keeps
    them between runs: a mutant of a function whose code is the same as at ``rev`` (mutmut's
    own hash of it; a file renamed since counts as the same file) keeps its status, the
    mutants of every other function are left for the run.  For a machine without the
    ``mutants/`` of the run that ``rev`` recorded: how many statuses were kept."""
    generate()
    recorded = json.loads(
        subprocess.run(
            ["git", "show", f"{rev}:docs/mutation/results.json"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout
    )
    status_at = {name: status for entry in recorded.values() for name, status in entry["statuses"].items()}
    moved = subprocess.run(
        ["git", "diff", "--name-status", "-M", rev, "HEAD", "--", "sm120patch"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    renamed = {new: old for kind, old, new in (line.split("\t") for line in moved.splitlines() if line.startswith("R"))}
    with tempfile.TemporaryDirectory(prefix="sm120patch-mutmut-since-") as scratch:
        old_tree = Path(scratch) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(old_tree), rev], cwd=REPO, check=True, capture_output=True
        )
        try:
            made = subprocess.run([sys.executable, "-c", GENERATE], cwd=old_tree, capture_output=True, text=True)
            if made.returncode != 0:
                sys.exit(f"mutmut could not make the mutants of {rev}:\n" + made.stderr[-2000:])
            old_metas = metas(old_tree)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old_tree)], cwd=REPO, capture_output=True)
    kept = 0
    for path, meta in metas(REPO).items():
        old_path = renamed.get(path, path)
        old_hashes = old_metas.get(old_path, {}).get("hash_by_function_name", {})
        module, old_module = module_of(path), module_of(old_path)
        for name in meta["exit_code_by_key"]:
            function = name[len(module) + 1 :].rsplit("__mutmut_", 1)[0]
            status = status_at.get(old_module + name[len(module) :])
            if status in EXIT_CODE_OF and old_hashes.get(function) == meta["hash_by_function_name"].get(function):
                meta["exit_code_by_key"][name] = EXIT_CODE_OF[status]
                kept += 1
        (REPO / "mutants" / f"{path}.meta").write_text(json.dumps(meta, indent=4))
    return kept


def run_mutmut(targets: list[str], budget_s: float, children: int, what: str) -> None:
    """``mutmut run`` over ``targets`` (every mutant not checked yet when empty) for at most
    ``budget_s``: on timeout, what finished is in mutmut's own records, the rest reads "not
    checked", and the next run goes on from there."""
    clear_leftovers()
    # mutmut ends each forked test session without pytest's clean-up, so every mutant's
    # tmp_path folders stay (GBs in a run): they go under a root of this run's own, removed after.
    memory = Path("/dev/shm")
    temproot = tempfile.mkdtemp(prefix="sm120patch-mutmut-", dir=memory if os.access(memory, os.W_OK) else None)
    try:
        with contextlib.suppress(subprocess.TimeoutExpired):
            ran = subprocess.run(
                [*MUTMUT, "run", "--max-children", str(children), *targets],
                cwd=REPO,
                timeout=budget_s,
                capture_output=True,
                text=True,
                env={**os.environ, "PYTEST_DEBUG_TEMPROOT": temproot},
            )
            if ran.returncode != 0:  # e.g. "failed to collect stats": a test fails in mutants/
                tail = (ran.stdout + ran.stderr).replace("\r", "\n").strip().splitlines()[-15:]
                sys.exit(f"{what}: mutmut run ended with {ran.returncode}:\n" + "\n".join(tail))
    finally:
        shutil.rmtree(temproot, ignore_errors=True)


def run_module(module: str, budget_s: float, open_only: bool, children: int) -> tuple[dict[str, str], int]:
    """Each mutant of ``module`` and its status (killed, survived, timeout, ...), and how many
    of them this run checked (all of them, or with ``open_only`` those not answered before)."""
    targets = [f"{module}.x_*", f"{module}.xǁ*"]
    if open_only:
        targets = [name for name in open_targets() if in_module(name, module)]
    if targets:
        run_mutmut(targets, budget_s, children, module)
    statuses = {name: status for name, status in statuses_now().items() if in_module(name, module)}
    return statuses, len(targets) if open_only else len(statuses)


def run_together(budget_s: float, children: int, open_only: bool, modules: list[str]) -> float:
    """One mutmut run over every mutant of the package (its tests' stats and the clean run
    once, not once per module): seconds it took.  Run again after a timeout, it goes on
    where it stopped (mutmut keeps each mutant's status).  With ``open_only``, the mutants
    checked and not answered yet (survivors, timeouts), named: for after a whole run, when
    tests were added for them (``modules``: only theirs, the modules those tests are for)."""
    start = time.monotonic()
    # the mutants never checked (and those of changed functions) are left to a run without
    # names: named, thousands of them would cost mutmut more to match than to run
    targets = (
        [
            name
            for name, status in open_targets().items()
            if status != "not checked" and (not modules or any(in_module(name, m) for m in modules))
        ]
        if open_only
        else []
    )
    if targets or not open_only:
        run_mutmut(targets, budget_s, children, "every module")
    return time.monotonic() - start


def record_together(results: dict[str, dict], seconds: float, children: int, fresh: bool) -> dict[str, dict]:
    """Every module's statuses as the together run left them (the modules no longer in the
    package dropped).  Its time is added to the pass over every mutant while that pass had
    mutants to go; once it is done, to the runs after it (``after_seconds``: survivors again
    after their tests, the functions changed since).  ``fresh``: mutmut had no statuses yet."""
    statuses = statuses_now()
    before = None if fresh else next((e["together"] for e in results.values() if "together" in e), None)
    if before is not None and (not before.get("unfinished") or "after_seconds" in before):  # a run after the pass
        timing = {"seconds": before["seconds"], "after_seconds": round(before.get("after_seconds", 0) + seconds)}
    else:
        timing = {"seconds": round(seconds + (before["seconds"] if before is not None else 0))}
    together = {
        **timing,
        "children": children,
        "cpus": os.cpu_count(),
        "unfinished": any(status == "not checked" for status in statuses.values()),
    }
    recorded = {}
    for module in every_module():
        mine = {name: status for name, status in statuses.items() if in_module(name, module)}
        recorded[module] = {
            "statuses": mine,
            "checked": len(mine),
            "date": time.strftime("%Y-%m-%d"),
            "together": together,
        }
    return recorded


LINES = REPO / "mutants" / "changed-lines.json"


def load_lines() -> dict[str, list]:
    return json.loads(LINES.read_text()) if LINES.exists() else {}


def save_lines(cache: dict[str, list]) -> None:
    if LINES.parent.is_dir():
        LINES.write_text(json.dumps(cache))


#: Each named mutant's first changed line, as ``mutmut show`` gives it, in one process
#: (``mutmut show`` costs a second a call: a minute for every sixty survivors).
SHOW = (
    "import json, sys\n"
    "from mutmut.mutation.diff_apply import get_diff_for_mutant\n"
    "lines = {}\n"
    "for name in json.load(sys.stdin):\n"
    "    added = [l[1:].strip() for l in get_diff_for_mutant(name).splitlines()\n"
    "             if l.startswith('+') and not l.startswith('+++')]\n"
    "    lines[name] = added[0] if added else ''\n"
    "json.dump(lines, sys.stdout)\n"
)


def _stamp(name: str) -> int | None:
    """The mtime of the mutated file that holds ``name`` (None when mutants/ is gone)."""
    module = name.split("__mutmut_", 1)[0].rsplit(".", 1)[0]
    base = REPO / "mutants" / Path(*module.split("."))
    source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    return source.stat().st_mtime_ns if source.exists() else None


def changed_lines(names: list[str], cache: dict[str, list]) -> dict[str, str]:
    """Each mutant's changed line ('' when mutants/ is gone).  ``cache``: lines already
    shown, each with its mutated file's mtime, so a run only shows what changed."""
    stamps = {name: _stamp(name) for name in names}
    lines = {name: str(cache[name][0]) for name in names if name in cache and cache[name][1] == stamps[name]}
    wanted = [name for name in names if name not in lines and stamps[name] is not None]
    if wanted:
        shown = subprocess.run(
            [sys.executable, "-c", SHOW], cwd=REPO, input=json.dumps(wanted), capture_output=True, text=True
        )
        if shown.returncode != 0:
            sys.exit("mutmut could not show the mutants:\n" + "\n".join(shown.stderr.splitlines()[-15:]))
        for name, line in json.loads(shown.stdout).items():
            lines[name] = line
            cache[name] = [line, stamps[name]]
    return {name: lines.get(name, "") for name in names}


def load_triage() -> dict[str, str]:
    """``"<function>: <mutated line>"`` -> why that mutant is equivalent."""
    if not TRIAGE.exists():
        return {}
    data = tomllib.loads(TRIAGE.read_text())
    return {key: entry["why"] for entry in data.get("equivalent", []) for key in entry["mutants"]}


def triage_key(name: str, line: str) -> str:
    """How triage.toml names a mutant: mutmut's numbers shift when a function changes."""
    return f"{name.rsplit('__mutmut_', 1)[0]}: {line}"


def table(results: dict[str, dict], equivalent: dict[str, str]) -> str:
    lines = [
        "| module | mutants | killed | survived | no test reaches it | equivalent | not answered | other "
        "| not checked yet | score | time |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for module, entry in sorted(results.items()):
        statuses: dict[str, str] = entry["statuses"]
        counts = Counter(statuses.values())
        killed = counts.get("killed", 0)
        missed = [name for name, status in statuses.items() if status in MISSED]
        same = sum(1 for name in missed if name in equivalent)
        unchecked = counts.get("not checked", 0)
        other = len(statuses) - killed - len(missed) - unchecked
        judged = killed + len(missed) - same
        score = f"{100 * killed / judged:.0f} %" if judged else "—"
        lines.append(
            f"| `{module}` | {len(statuses)} | {killed} | {counts.get('survived', 0)} | {counts.get('no tests', 0)} "
            f"| {same} | {len(missed) - same} | {other} | {unchecked} | {score} | {_time(entry)} |"
        )
    return "\n".join(lines)


def _time(entry: dict) -> str:
    """The module's last run: its own seconds, or one run over every module."""
    if "together" in entry:
        return "one run"
    return f"{entry['seconds']:.0f} s{_kind(entry)}"


def _kind(entry: dict) -> str:
    """How much the module's last run checked: every mutant, or (``--open``) how many."""
    checked = entry.get("checked")
    if checked is None or checked >= len(entry["statuses"]):
        return ""
    return f" ({checked} open)"


def timing(results: dict[str, dict]) -> str:
    """What the kept runs cost, summed: the runs that checked every mutant, and the --open ones;
    or the one run over every module."""
    together = next((e["together"] for e in results.values() if "together" in e), None)
    if together is not None:
        mutants = sum(len(e["statuses"]) for e in results.values())
        first = (
            f"One mutmut run over every module took {together['seconds'] / 60:.0f} min "
            f"({together['children']} at a time, on a {together['cpus']}-core machine)"
        )
        stopped = f"{_not_checked(results)} of them not checked yet (the slowest: mutmut checks the quickest first)"
        if together.get("after_seconds"):
            text = (
                f"{first}; the runs after it (survivors again after their tests, functions changed since) took "
                f"{together['after_seconds'] / 60:.0f} min, for {mutants} mutants now"
                + (f", and stopped with {stopped}" if together["unfinished"] else "")
            )
        else:
            text = f"{first} for {mutants} mutants" + (f"; it stopped with {stopped}" if together["unfinished"] else "")
        return text + ". A killed mutant costs about a second; one that survives costs every test that reaches it."
    kept = {m: e.get("full_seconds", e["seconds"] if "checked" not in e else None) for m, e in results.items()}
    full: dict[str, int] = {m: seconds for m, seconds in kept.items() if seconds is not None}
    reruns = [e for e in results.values() if _kind(e)]
    text = (
        f"The runs that checked every mutant of their module took {sum(full.values()) / 60:.0f} min "
        f"for {sum(len(results[m]['statuses']) for m in full)} mutants in {len(full)} modules on this "
        "2-core machine"
    )
    if reruns:
        text += (
            f"; the last `--open` runs took {sum(e['seconds'] for e in reruns) / 60:.0f} min "
            f"for {sum(e['checked'] for e in reruns)} mutants in {len(reruns)} modules"
        )
    return text + ". A killed mutant costs about a second; one that survives costs every test that reaches it."


def _not_checked(results: dict[str, dict]) -> int:
    return sum(status == "not checked" for e in results.values() for status in e["statuses"].values())


def not_run(results: dict[str, dict]) -> str:
    """The modules of the package that no kept run covers yet."""
    missing = [module for module in every_module() if module not in results]
    if not missing:
        return "Every module of the package has been run.\n"
    return "Not run yet: " + ", ".join(f"`{module}`" for module in missing) + ".\n"


def render(results: dict[str, dict], output: Path) -> list[str]:
    """Write the report; returns the survivors nobody has answered yet."""
    triage = load_triage()
    missed = sorted(
        name for entry in results.values() for name, status in entry["statuses"].items() if status in MISSED
    )
    cache = load_lines()
    lines = changed_lines(missed, cache)
    save_lines(cache)
    equivalent = {
        name: triage[triage_key(name, lines[name])] for name in missed if triage_key(name, lines[name]) in triage
    }
    open_ = [name for name in missed if name not in equivalent]
    # a key of a function with mutants not checked yet may name one of those
    waiting = {
        name.rsplit("__mutmut_", 1)[0]
        for entry in results.values()
        for name, status in entry["statuses"].items()
        if status == "not checked"
    }
    live = {triage_key(name, lines[name]) for name in missed}
    stale = sorted(key for key in set(triage) - live if key.split(": ", 1)[0] not in waiting)
    reasons: dict[str, list[str]] = {}
    for name, why in equivalent.items():
        reasons.setdefault(why, []).append(name)
    text = [
        "# Mutation testing against the tests that need no network\n",
        "Generated by `python3 scripts/mutation_report.py` with mutmut, configured in `pyproject.toml` "
        "(`[tool.mutmut]`: the fast tier and the `offline` tests, `-x`; the remote scripts are not mutated, "
        "they run in other interpreters without mutmut's trampolines; `runner/__init__`, which runs them, is). "
        "Raw statuses: `docs/mutation/results.json`; the equivalent mutants and why: `docs/mutation/triage.toml`.\n",
        "Score = killed / (killed + survived + no test reaches it − equivalent), over the mutants checked. "
        "*Other* is timeouts and mutants mutmut could not check; *not checked yet*, those a run stopped "
        "before (mutmut checks the quickest first). *Time* is the module's last run; a run with `--open` checks only "
        "the mutants not killed before (their number in brackets), so it is shorter than a first run.\n",
        timing(results) + "\n",
        table(results, equivalent) + "\n",
        not_run(results),
        "## Survivors not yet answered\n",
        "Show one with `mutmut show NAME`.\n",
        "\n".join(f"- `{name}`: `{lines[name]}`" for name in open_) or "None.",
        "\n## Equivalent survivors, and why\n",
    ]
    for why, names in reasons.items():
        text.append(f"- {why}\n" + "\n".join(f"  - `{name}`: `{lines[name]}`" for name in names))
    if not reasons:
        text.append("None.")
    output.write_text("\n".join(text) + "\n")
    if stale:
        print(f"triage names no mutant that is not killed: {'; '.join(stale)}", file=sys.stderr)
    return open_


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", help="dotted module names (default: every module)")
    parser.add_argument("--budget", type=float, default=900, help="seconds per module")
    parser.add_argument(
        "--open", action="store_true", help="only the mutants not killed yet nor named equivalent in triage.toml"
    )
    parser.add_argument("--render", action="store_true", help="only rewrite the report from the kept results")
    parser.add_argument("--children", type=int, default=2, help="mutants checked at a time (mutmut --max-children)")
    parser.add_argument(
        "--together", action="store_true", help="one mutmut run over every module (--budget: its seconds in all)"
    )
    parser.add_argument(
        "--since",
        metavar="REV",
        help="with --together and no mutants/ yet: keep the statuses REV recorded for the functions unchanged since",
    )
    parser.add_argument("--no-render", action="store_true", help="keep the results, write no report")
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "mutation.md")
    args = parser.parse_args()
    results: dict[str, dict] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.since and not args.together:
        parser.error("--since goes with --together")
    if args.together:
        fresh = not any((REPO / "mutants").rglob("*.meta"))
        if args.since:
            if not fresh:
                parser.error("--since starts a fresh mutants/: remove the one here first")
            print(f"kept {seed_since(args.since)} statuses from {args.since}", file=sys.stderr, flush=True)
            fresh = False
        seconds = run_together(args.budget, args.children, args.open, args.modules)
        results = record_together(results, seconds, args.children, fresh)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    elif not args.render:
        for module in args.modules or every_module():
            start = time.monotonic()
            statuses, checked = run_module(module, args.budget, args.open, args.children)
            seconds = round(time.monotonic() - start)
            before = results.get(module, {})
            results[module] = {
                "statuses": statuses,
                "checked": checked,
                "seconds": seconds,
                # the last run that checked every mutant, kept through later --open runs
                "full_seconds": seconds if checked >= len(statuses) else before.get("full_seconds"),
                "date": time.strftime("%Y-%m-%d"),
            }
            print(f"{module}: {dict(Counter(statuses.values()))}", file=sys.stderr, flush=True)
            RESULTS.parent.mkdir(parents=True, exist_ok=True)
            RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    if args.no_render:
        return 0
    open_ = render(results, args.output)
    print(f"wrote {args.output}: {len(open_)} survivors not answered", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
