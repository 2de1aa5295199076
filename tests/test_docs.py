"""The documentation the tool shows or ships says what the code does, from public sources."""

from __future__ import annotations

import contextlib
import io
import json
import re
import runpy
import sys
from pathlib import Path

import pytest

from sm120patch.patcher.plan.registry import all_patches

REPO = Path(__file__).resolve().parent.parent


def check_script(script: str) -> int:
    """``python3 SCRIPT --check`` run in this process (its output swallowed): its exit code."""
    saved = list(sys.path), sys.argv
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            sys.argv = [str(REPO / script), "--check"]
            runpy.run_path(str(REPO / script), run_name="__main__")
        except SystemExit as exit:
            return 1 if exit.code not in (0, None) else 0
        finally:
            sys.path[:], sys.argv = saved
    return 0


PRIVATE = re.compile(r"upstream-sm120|sglang-versions\.md|fused-path|anchors\.md|shared/|seeds/|msg 743|§")


def test_readme_patch_table_is_generated_from_the_anchor_tables() -> None:
    assert check_script("scripts/docs_tables.py") == 0, "README.md is out of date: run python3 scripts/docs_tables.py"


def test_user_facing_text_cites_only_public_sources() -> None:
    texts = {f"{p.id} docstring": p.doc for p in all_patches()}
    shipped = [*REPO.glob("sm120patch/**/*.py"), *REPO.glob("docs/**/*.md"), REPO / "README.md", REPO / "CHANGELOG.md"]
    assert REPO / "sm120patch" / "patcher" / "patches" / "workspace_preflight.py" in shipped  # the subpackages too
    for path in shipped:
        texts[str(path.relative_to(REPO))] = path.read_text()
    cited = {name: PRIVATE.findall(text) for name, text in texts.items()}
    assert {name: found for name, found in cited.items() if found} == {}


def test_changelog_names_this_version() -> None:
    from sm120patch import __version__

    assert f"## {__version__}" in (REPO / "CHANGELOG.md").read_text()


DOCS = sorted(REPO.glob("docs/*.md"))
PAGES = [REPO / "README.md", *DOCS]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the headings of ``page``."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_relative_link_in_readme_and_docs_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+://|mailto:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists() or (anchor and resolved.suffix == ".md" and anchor not in anchors(resolved)):
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert broken == []


def test_every_repository_file_the_docs_name_exists() -> None:
    """A moved test or script leaves no stale name in the README, the docs or the CHANGELOG."""
    top = "tests|scripts|benchmarks|examples|sm120patch|docs"
    named = re.compile(rf"(?<![\w/.~-])((?:{top})/[\w./-]*\.(?:py|md|sh|toml|yml|json))\b")
    missing = []
    for page in [*PAGES, REPO / "CHANGELOG.md"]:
        for rel in set(named.findall(page.read_text())):
            if not (REPO / rel.split("::")[0]).exists():
                missing.append(f"{page.relative_to(REPO)}: {rel}")
    assert sorted(missing) == []


def test_ci_runs_exactly_the_readme_test_command() -> None:
    readme = (REPO / "README.md").read_text()
    block = re.search(r"^## Tests$.*?^```bash\n(.*?)^```", readme, re.M | re.S)
    assert block, "README.md has a Tests section with the command"
    documented = [
        step.strip()
        for line in block.group(1).splitlines()
        for step in line.split("#")[0].split("&&")
        if step.strip() and not step.strip().startswith("apt-get")  # .ci/run installs those only as root
    ]
    ci = [
        line.strip()
        for line in (REPO / ".ci" / "run").read_text().splitlines()
        if line.strip().startswith(("python3 ", "ruff ", "mypy", "lint-imports"))
    ]
    assert ci == documented
    assert "pytest" in readme
    pyproject = (REPO / "pyproject.toml").read_text()
    if any(" -n " in step for step in documented):  # pytest-xdist comes with the test extra
        assert re.search(r'^test = \[.*"pytest-xdist[>=\d.]*"', pyproject, re.M)


def test_readme_is_a_few_minutes_read() -> None:
    """What it is, a quick start, the commands, links: the reference lives in docs/."""
    assert len((REPO / "README.md").read_text().splitlines()) <= 180  # 148 when the reference moved out


GENERATED = {
    "scripts/compat_table.py": "compatibility",
    "benchmarks/run.py": "performance",
    "scripts/reliability_report.py": "reliability",
    "scripts/backtest.py": "backtest",
}


@pytest.mark.parametrize("script", sorted(GENERATED))
def test_generated_pages_are_what_this_code_renders_and_name_this_version(script: str) -> None:
    """The page is rendered again from the data its run kept (no download, no timing): a page
    edited by hand, a renderer changed without a new run, or a run by an older sm120patch
    fails here; run the script again."""
    from sm120patch import __version__

    assert check_script(script) == 0, f"{script} would write its page differently: run python3 {script}"
    page = GENERATED[script]
    assert json.loads((REPO / "docs" / f"{page}.json").read_text())["tool_version"] == __version__
    assert f"(sm120patch {__version__}," in (REPO / "docs" / f"{page}.md").read_text()
