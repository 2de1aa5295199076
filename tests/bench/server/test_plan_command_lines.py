"""``bench server --plan``'s command lines, from ``plan.plan`` in this process: each runs this
release's benchmark module as the first run of its configuration, and gets the tiny tokenizer
only where the user's model directory has none."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120patch.bench.server import driver, plan
from tests.bench.server.hand import settings


def test_each_command_runs_the_benchmark_module_as_the_first_run(tmp_path: Path) -> None:
    (tmp_path / "sglang" / "benchmark").mkdir(parents=True)
    (tmp_path / "sglang" / "benchmark" / "one_batch.py").write_text("")
    data = plan.plan(settings(package_dir=tmp_path / "sglang"))
    assert [c["name"] for c in data["configs"]] == ["default", "fusion"]
    for one in data["configs"]:
        args = one["args"]
        assert args[1:3] == ["-m", "sglang.benchmark.one_batch"]
        assert args[args.index("--run-name") + 1] == f"sm120patch-{one['name']}-1"


@pytest.mark.parametrize(("files", "tokenizer"), [(["tokenizer.json"], None), ([], driver.PLAN_TOKENIZER)])
def test_the_tiny_tokenizer_only_where_the_model_has_none(
    tmp_path: Path, files: list[str], tokenizer: str | None
) -> None:
    for name in ["config.json", *files]:
        (tmp_path / name).write_text("{}")
    assert driver.plan_tokenizer(settings(model_path=tmp_path)) == tokenizer
    assert driver.plan_tokenizer(settings(model_path=None)) is None  # the bundled model comes with one
