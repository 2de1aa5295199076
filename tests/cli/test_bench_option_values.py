"""The values ``bench kernel --tp`` and ``bench server --configs`` refuse, and what the refusal
names: ``--tp`` takes 2 ranks or more (an allreduce needs two), checked on a range made here
(the cli builds its own while it is imported, so a test that imports it once cannot see a
change to how it is built); a ``--configs`` name that is no configuration is blamed on
``--configs``."""

from __future__ import annotations

import click
import pytest

from sm120patch.cli.bench import _AllreduceRanks
from tests.support.cli import run


def test_the_allreduce_bench_takes_two_ranks_or_more() -> None:
    ranks = _AllreduceRanks()
    assert [ranks.convert(tp, None, None) for tp in (2, 3, 8)] == [2, 3, 8]


@pytest.mark.parametrize("tp", [1, 0])
def test_fewer_than_two_ranks_name_the_bench_that_takes_them(tp: int) -> None:
    with pytest.raises(click.BadParameter) as refused:
        _AllreduceRanks().convert(tp, None, None)
    assert f"{tp} is not in the range x>=2" in refused.value.message
    assert "--tp 1 only with `bench server`" in refused.value.message


def test_an_unknown_configuration_is_a_usage_error_naming_configs() -> None:
    code, _, err = run("bench", "server", "--configs", "nope,default")
    assert code == 2
    assert "Error: Invalid value for '--configs': unknown configuration nope" in err
