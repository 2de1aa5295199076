"""``bench server --fuse-up-to``: each run with a token limit proves the limit its processes
took (the hook's ``token_limit`` records), or the bench says which limits it found instead and
gives no verdict; the status line names the limit of the third setting.  Runs are filled by a
stand-in for the driver's ``_one`` (test_driver_steps.py), so no sglang process starts."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from sm120patch.bench.remote import server_hook
from sm120patch.bench.server import driver
from sm120patch.bench.server.counter import Counts
from sm120patch.bench.server.verdict import Kind
from tests.bench.server.hand import FLAGS, fused, run, settings
from tests.bench.server.test_driver_steps import fake_one


def limited(*limits: int) -> Counts:
    """Counts of a run whose two ranks launched the fused kernel with these limits set."""
    return dataclasses.replace(fused(), token_limits=set(limits))


def why(limit: int, found: str) -> str:
    return (
        f"the fusion-limit run was to fuse up to {limit} tokens, but the limits set in sglang's processes were: "
        f"{found} (its gate module was not imported, or has no {server_hook.LIMIT_NAME})"
    )


@pytest.mark.parametrize(
    ("limits", "found"),
    [((), "none"), ((2048,), "2048"), ((2048, 128), "128, 2048")],
    ids=["no-limit-set", "sglangs-own-limit", "two-limits-sorted"],
)
def test_a_limit_run_whose_processes_took_another_limit_says_which(limits: tuple[int, ...], found: str) -> None:
    assert driver._check(run("limit", 1, {}, counts=limited(*limits)), FLAGS, 2, 256) == why(256, found)


def test_a_limit_run_that_took_its_limit_passes() -> None:
    assert driver._check(run("limit", 1, {}, counts=limited(256)), FLAGS, 2, 256) is None
    # no process wrote its counts: the counter's absence is said instead of a limit nobody read
    unreached = driver._check(run("limit", 1, {}, counts=Counts()), FLAGS, 2, 256)
    assert unreached is not None and unreached.endswith("the call counter did not reach sglang's processes")


def three_settings(
    package: Path, monkeypatch: pytest.MonkeyPatch, limit_counts: Counts
) -> tuple[driver.ServerResult, list[str]]:
    """One repeat of off, on (sglang's limit of 2048) and --fuse-up-to 256, the last run's
    processes having set ``limit_counts``."""
    script: dict[tuple[str, int], dict[str, Any]] = {
        ("off", 1): {"decode_ms": {1: 10.0, 8: 12.0}},
        ("on", 1): {"decode_ms": {1: 9.0, 8: 11.0}, "counts": limited(2048)},
        ("limit", 1): {"decode_ms": {1: 9.5, 8: 11.5}, "counts": limit_counts},
    }
    status: list[str] = []
    monkeypatch.setattr(driver, "_one", fake_one(script, []))
    changes = {"tp": None, "repeat": 1, "fuse_up_to": 256, "sglang_limit": 2048}
    return driver.run(settings(package_dir=package, hidden=256, **changes), status.append), status


def test_the_status_line_names_the_limit_of_the_third_setting(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done, status = three_settings(host, monkeypatch, limited(256))
    assert status == ["run 1/3, default", "run 2/3, fusion", "run 3/3, fusion-limit (up to 256 tokens)"]
    assert done.problems == [] and done.verdict.kind is not Kind.NONE


def test_a_limit_run_that_kept_sglangs_limit_gives_no_verdict(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate module never took 256: its figures would be sglang's limit's, under another name."""
    done, _ = three_settings(host, monkeypatch, limited(2048))
    assert done.problems == [why(256, "2048")]
    assert done.verdict.kind is Kind.NONE and done.verdict.advice == "no verdict: " + why(256, "2048")
