"""The model a server bench runs: the bundled config's shape, the user's config read and refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sm120patch.bench.server import config
from sm120patch.errors import EnvironmentProblem


def test_bundled_config_is_llama_shaped(tmp_path: Path) -> None:
    model = config.write_bundled(tmp_path / "m", 7168, 4, "bf16", 8, 320)
    data = json.loads((tmp_path / "m" / "config.json").read_text())
    assert data["architectures"] == ["LlamaForCausalLM"] and data["model_type"] == "llama"
    assert (data["hidden_size"], data["num_attention_heads"], data["num_key_value_heads"]) == (7168, 56, 8)
    assert data["intermediate_size"] == 25088 and data["intermediate_size"] % 256 == 0
    assert data["vocab_size"] >= 10000  # bench_one_batch draws its input ids below 10000
    assert data["torch_dtype"] == "bfloat16" and data["max_position_embeddings"] >= 320
    assert model.tokenizer is None and (tmp_path / "m" / "tokenizer.json").is_file()
    assert model.describe() == "LlamaForCausalLM, hidden 7168, 4 layers (bundled config; random weights)"


def test_bundled_config_refuses_what_cannot_shard(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentProblem, match="multiple of 128"):
        config.write_bundled(tmp_path, 1000, 4, "bf16", 2, 10)
    with pytest.raises(EnvironmentProblem, match="--tp 4 does not divide"):
        config.write_bundled(tmp_path, 384, 4, "bf16", 4, 10)


def test_user_config_multimodal_sizes_and_own_tokenizer(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Gemma3ForConditionalGeneration"],
                "text_config": {"hidden_size": 2560, "num_hidden_layers": 34, "num_attention_heads": 8},
            }
        )
    )
    (tmp_path / "tokenizer.json").write_text("{}")
    model = config.read_user(tmp_path, 2, tmp_path / "tiny-tokenizer")
    assert (model.architecture, model.hidden, model.layers, model.tokenizer) == (
        "Gemma3ForConditionalGeneration",
        2560,
        34,
        None,
    )
    assert not (tmp_path / "tiny-tokenizer").exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "cannot be read"),
        ("[1, 2]", "is not a JSON object"),
        ('{"hidden_size": 4096}', "has no hidden_size / num_hidden_layers"),
        ('{"hidden_size": 4096, "num_hidden_layers": 2, "num_attention_heads": 6}', "--tp 4 does not divide"),
    ],
)
def test_user_config_refused(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(EnvironmentProblem, match=message):
        config.read_user(tmp_path, 4, tmp_path / "tok")
