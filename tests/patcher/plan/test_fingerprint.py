"""The fingerprint verify trusts a record by covers every module of sm120patch: a change to
any of them (a patch, the planner, a probe script) makes the record untrusted."""

from __future__ import annotations

from sm120patch.patcher.plan import fingerprint


def test_every_module_of_the_package_is_in_the_fingerprint() -> None:
    sources = fingerprint._sources()
    names = {path.relative_to(fingerprint.PACKAGE).as_posix() for path in sources}
    listed = {
        "cli/__init__.py",
        "patcher/plan/trust.py",
        "patcher/patches/communicator_flag.py",
        "runner/remote/find_sglang.py",
    }
    assert listed <= names
    assert names == {p.relative_to(fingerprint.PACKAGE).as_posix() for p in fingerprint.PACKAGE.rglob("*.py")}
    assert sources == sorted(sources)
