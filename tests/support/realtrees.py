"""Real sglang releases for the tests: downloaded from the package index, installed by pip.

Wheels are cached in ``~/.cache/sm120patch/wheels`` (``SM120PATCH_WHEEL_CACHE``), installed
trees (``pip install --no-deps --target``) in ``~/.cache/sm120patch/trees``.  Each test gets a
hard-linked copy: the tool replaces files by rename, never in place, so the cached tree
stays pristine (``pytest_sessionfinish`` in tests/conftest.py checks that at the end of the
session).

The ``ast`` checks here are written independently of the tool's libcst code: they compare
the release file with the patched one node by node and accept only the intended changes.
"""

from __future__ import annotations

import ast
import base64
import csv
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from sm120patch.patcher.commands.demo import fetch, fetch_wheel, wheel_cache

TREES = Path(os.environ.get("SM120PATCH_TREE_CACHE") or wheel_cache().parent / "trees")


def installed_release(version: str) -> Path:
    """site-packages-like dir with sglang==version installed by pip (cached)."""
    site = TREES / version
    if (site / "sglang" / "__init__.py").is_file() and any(site.glob("sglang-*.dist-info/RECORD")):
        return site
    wheel = fetch_wheel(version)
    TREES.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=TREES, prefix=f".{version}-"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-compile",
            "--disable-pip-version-check",
            "--target",
            str(tmp),
            str(wheel),
        ],
        check=True,
    )
    shutil.rmtree(site, ignore_errors=True)
    os.replace(tmp, site)
    return site


def copy_release(version: str, dest: Path, hardlink: bool = True) -> Path:
    """A private copy of the installed release; returns the ``sglang`` package dir."""
    site = installed_release(version)
    dest.mkdir(parents=True, exist_ok=True)
    for entry in site.iterdir():
        if entry.name == "bin":
            continue
        if hardlink:
            subprocess.run(["cp", "-al", str(entry), str(dest / entry.name)], check=True)
        else:
            shutil.copytree(entry, dest / entry.name, symlinks=True)
    return dest / "sglang"


def record_hashes(package_dir: Path) -> dict[str, str]:
    """RECORD sha256 (hex) by path relative to the package dir (read independently)."""
    (dist_info,) = package_dir.parent.glob("sglang-*.dist-info")
    hashes = {}
    with open(dist_info / "RECORD", newline="") as fh:
        for row in csv.reader(fh):
            if len(row) >= 2 and row[0].startswith("sglang/") and row[1].startswith("sha256="):
                digest = row[1][7:]
                hashes[row[0][len("sglang/") :]] = base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
    return hashes


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_matches_record(package_dir: Path, rels: list[str]) -> None:
    record = record_hashes(package_dir)
    for rel in rels:
        assert sha256(package_dir / rel) == record[rel], f"{rel} differs from RECORD"


# --- independent ast comparison ------------------------------------------------------------

SM120_TERMS = {
    ast.dump(ast.parse(src, mode="eval").body)
    for src in ("_is_sm120_supported", "is_sm120_supported()", "get_platform().is_sm120")
}


def _sm120_term(node: object) -> bool:
    """An SM120 term, bare or as server-args-auto-enable limits it:
    ``(<SM120 term> and <receiver>.tp_size == 2)``."""
    return isinstance(node, ast.expr) and (ast.dump(node) in SM120_TERMS or _tp_gated(node))


def _tp_gated(node: object) -> bool:
    if not (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And) and len(node.values) == 2):
        return False
    term, tp = node.values
    return (
        ast.dump(term) in SM120_TERMS
        and isinstance(tp, ast.Compare)
        and isinstance(tp.left, ast.Attribute)
        and isinstance(tp.left.value, ast.Name)
        and tp.left.attr == "tp_size"
        and [type(op) for op in tp.ops] == [ast.Eq]
        and [ast.dump(c) for c in tp.comparators] == [ast.dump(ast.Constant(2))]
    )


def _inserted_kind(node: object) -> str | None:
    """What an element that exists only in the patched file is, if it is an intended one."""
    if isinstance(node, ast.alias) and node.name == "is_sm120_supported" and node.asname is None:
        return "import"
    if isinstance(node, ast.Assign) and [ast.dump(t) for t in node.targets] == [
        ast.dump(ast.Name("_is_sm120_supported", ast.Store()))
    ]:
        return "flag"
    if _sm120_term(node):
        return "or-term"
    return None


def _show(node: object) -> str:
    if isinstance(node, list):
        return "[" + ", ".join(_show(n) for n in node) + "]"
    return ast.unparse(node) if isinstance(node, ast.AST) else repr(node)


def _sm12x_guard(node: object) -> bool:
    """``if not <SM120 term>:`` with no else."""
    return (
        isinstance(node, ast.If)
        and not node.orelse
        and isinstance(node.test, ast.UnaryOp)
        and isinstance(node.test.op, ast.Not)
        and ast.dump(node.test.operand) in SM120_TERMS
    )


def _guarded(a: list, b: list) -> bool:
    """``b`` is ``a`` with one run of statements moved, unchanged, under an SM12x guard."""
    for i, node in enumerate(b):
        if _sm12x_guard(node):
            k = len(node.body)
            dump = [ast.dump(x) for x in a]
            if (
                dump[:i] == [ast.dump(x) for x in b[:i]]
                and dump[i : i + k] == [ast.dump(x) for x in node.body]
                and dump[i + k :] == [ast.dump(x) for x in b[i + 1 :]]
            ):
                return True
    return False


def _differences(a: object, b: object, out: list[str]) -> None:
    """Walk two trees in step; name each intended change, raise AssertionError on any other."""
    if isinstance(a, list) and isinstance(b, list) and len(b) <= len(a) and _guarded(a, b):
        out.append("guard")
        return
    if isinstance(a, list) and isinstance(b, list) and len(b) == len(a) + 1:
        for i, node in enumerate(b):
            kind = _inserted_kind(node)
            if kind is None:
                continue
            trial: list[str] = []
            try:
                for x, y in zip(a, b[:i] + b[i + 1 :], strict=False):
                    _differences(x, y, trial)
            except AssertionError:
                continue
            out += [kind, *trial]
            return
    if (
        isinstance(a, ast.expr)
        and isinstance(b, ast.BoolOp)
        and isinstance(b.op, ast.Or)
        and len(b.values) == 2
        and ast.dump(b.values[0]) == ast.dump(a)
        and _sm120_term(b.values[1])
    ):
        out.append("or-term")  # a bare probe became `probe or <SM120 term>`
        return
    if _sm120_term(a) and _sm120_term(b) and _tp_gated(a) != _tp_gated(b):
        bare = [ast.dump(x.values[0] if _tp_gated(x) else x) for x in (a, b)]  # type: ignore[attr-defined]
        if bare[0] == bare[1]:
            out.append("or-term")  # the SM120 term limited to TP 2 or set free (apply --auto-enable-tp)
            return
    if (
        isinstance(a, ast.Constant)
        and isinstance(b, ast.Constant)
        and type(a.value) is int
        and type(b.value) is int
        and b.value != a.value
    ):
        out.append("limit")  # the fusion token limit set by `apply --fuse-up-to`
        return
    if type(a) is not type(b):
        raise AssertionError(f"unexpected change: {_show(a)} -> {_show(b)}")
    if isinstance(a, ast.AST):
        for name in a._fields:
            _differences(getattr(a, name), getattr(b, name), out)
    elif isinstance(a, list):
        if len(a) != len(b):
            raise AssertionError(f"unexpected change: {_show(a)} -> {_show(b)}")
        for x, y in zip(a, b, strict=False):
            _differences(x, y, out)
    elif a != b:
        raise AssertionError(f"unexpected change: {a!r} -> {b!r}")


def intended_changes(old_src: bytes, new_src: bytes) -> list[str]:
    """Every difference between two versions of a file, each named (else AssertionError)."""
    changes: list[str] = []
    _differences(ast.parse(old_src), ast.parse(new_src), changes)
    return changes


# --- the full cycle, shared by the matrix tests and scripts/compat_table.py ------------------


def _py_files(package: Path) -> dict[str, bytes]:
    return {str(p.relative_to(package)): p.read_bytes() for p in package.rglob("*.py") if ".sm120patch" not in p.parts}


def run_cycle(package: Path, after_apply: Callable[[dict[str, bytes]], None] | None = None) -> dict:
    """apply, verify, apply again, revert on ``package``; check each step independently.

    ``after_apply`` gets the original files (by path relative to the package) while the
    tree is patched, for behavioural checks.  Returns what happened (per-patch states,
    files written, the verdict); raises AssertionError on anything that is not as it must be.
    """
    from sm120patch.patcher.commands.apply import apply as apply_tree
    from sm120patch.patcher.commands.revert import revert as revert_tree
    from sm120patch.patcher.commands.verify import verify as verify_tree
    from sm120patch.patcher.plan.registry import all_patches
    from sm120patch.sglang.tree import from_directory

    tree = from_directory(package)
    originals = _py_files(package)
    first = apply_tree(tree, list(all_patches()))
    result: dict = {
        "version": tree.version,
        "exit_code": first.exit_code,
        "refusal": first.plan.refusal if first.plan else None,
        "states": {r.id: r.state.value for r in (first.plan.reports if first.plan else [])},
        "written": sorted(first.written),
        "changes": {},
    }
    if first.exit_code != 0:
        assert _py_files(package) == originals, "a refused/drifting apply changed files"
        assert not (package / ".sm120patch" / "manifest.json").exists()
        assert first.written == []
        return result
    for rel, data in _py_files(package).items():
        if rel in first.written:
            compile(data, rel, "exec")
            result["changes"][rel] = intended_changes(originals[rel], data)
        else:
            assert data == originals[rel], f"{rel} changed but was not reported as written"
    assert all(r.state_after.value in ("applied", "not-needed") for r in first.plan.reports)
    if after_apply is not None:
        after_apply(originals)
    assert verify_tree(tree).exit_code == 0
    patched = _py_files(package)
    again = apply_tree(tree, list(all_patches()))
    assert again.exit_code == 0 and again.written == [], "second apply was not a no-op"
    assert _py_files(package) == patched
    back = revert_tree(tree)
    assert back.exit_code == 0, back.headline
    assert sorted(back.written) == result["written"]
    assert_matches_record(package, result["written"])
    assert _py_files(package) == originals
    return result


# --- serving environments: real venvs with sglang (and FlashInfer) installed by pip ---------


def pip_install_into(python: Path, *wheels: str, upgrade: bool = False) -> None:
    """``pip install --no-deps`` of ``wheels`` into the environment of ``python``."""
    command = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps"]
    command += ["--no-compile", "--disable-pip-version-check", *(["--upgrade"] if upgrade else []), *wheels]
    subprocess.run(command, check=True)


def bare_venv(root: Path) -> tuple[Path, Path]:
    """A venv at ``root`` with nothing installed (no pip): (its python, its site-packages)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    query = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(python), "-c", query], capture_output=True, text=True, check=True).stdout.strip()
    return python, Path(site)


def serving_env(root: Path, sglang: str, flashinfer: str | None = None) -> Path:
    """A venv at ``root`` with sglang (and FlashInfer) pip-installed without dependencies,
    as users install sglang over an image's torch; returns its python."""
    python, _ = bare_venv(root)
    wheels = [str(fetch_wheel(sglang))] + ([str(fetch("flashinfer-python", flashinfer))] if flashinfer else [])
    pip_install_into(python, *wheels)
    return python
