"""Every refusal of the model a server bench would run (bench/server/config: ``--model-path``'s
config, the bundled model's ``--hidden`` and ``--tp``) carries the code ``usage``."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120patch.bench.server import config
from sm120patch.errors import EnvironmentProblem


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "is not a local directory"),
        (b"{", "cannot be read"),
        (b"[1]", "is not a JSON object"),
        (b'{"hidden_size": 64}', "has no hidden_size / num_hidden_layers"),
        (b'{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 6}', "--tp 4 does not divide"),
    ],
    ids=["not-a-directory", "unreadable", "not-an-object", "no-sizes", "heads-not-divided"],
)
def test_a_user_model_refused_is_usage(tmp_path: Path, content: bytes | None, says: str) -> None:
    model = tmp_path / "model"
    if content is not None:
        model.mkdir()
        (model / "config.json").write_bytes(content)
    with pytest.raises(EnvironmentProblem) as raised:
        config.read_user(model, 4, tmp_path / "tok")
    assert raised.value.code == "usage" and says in str(raised.value)


@pytest.mark.parametrize(
    ("hidden", "tp", "says"),
    [(1000, 2, "needs a multiple of 128"), (384, 4, "--tp 4 does not divide")],
    ids=["not-whole-heads", "heads-not-divided"],
)
def test_a_bundled_model_refused_is_usage_and_writes_nothing(tmp_path: Path, hidden: int, tp: int, says: str) -> None:
    with pytest.raises(EnvironmentProblem) as raised:
        config.write_bundled(tmp_path / "m", hidden, 4, "bf16", tp, 10)
    assert raised.value.code == "usage" and says in str(raised.value)
    assert not (tmp_path / "m").exists()
