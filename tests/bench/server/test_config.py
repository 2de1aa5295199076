"""The model a server bench runs: the bundled config's shape, the user's config read and refused."""

from __future__ import annotations

import json
import locale
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


def test_bundled_config_every_field() -> None:
    assert config.bundled_config(1024, 2, "fp16", 5000) == {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 1024,
        "intermediate_size": 3584,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "hidden_act": "silu",
        "max_position_embeddings": 5000,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "initializer_range": 0.02,
        "torch_dtype": "float16",
    }


def test_bundled_config_kv_heads_and_sizes_at_their_edges() -> None:
    small = config.bundled_config(384, 1, "bf16", 4096)
    # 3 heads: 8 KV heads do not divide them, so every head has its own
    assert (small["num_attention_heads"], small["num_key_value_heads"]) == (3, 3)
    assert small["max_position_embeddings"] == 4096
    assert config.bundled_config(384, 1, "bf16", 100)["max_position_embeddings"] == 4096
    assert config.bundled_config(384, 1, "bf16", 4097)["max_position_embeddings"] == 4097
    assert small["intermediate_size"] == 1536  # 384 * 3.5 = 1344, rounded up to 256s
    assert config.bundled_config(2048, 1, "bf16", 1)["intermediate_size"] == 7168  # a multiple already
    sixteen = config.bundled_config(2048, 1, "bf16", 1)
    assert (sixteen["num_attention_heads"], sixteen["num_key_value_heads"]) == (16, 8)


def test_bundled_model_refusals_say_exactly_why(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentProblem) as raised:
        config.write_bundled(tmp_path / "a", 1000, 4, "bf16", 2, 10)
    assert str(raised.value) == "--hidden 1000: the bundled model needs a multiple of 128 (head size)"
    with pytest.raises(EnvironmentProblem) as raised:
        config.write_bundled(tmp_path / "b", 384, 4, "bf16", 2, 10)
    assert str(raised.value) == (
        "--hidden 384 gives 3 attention heads, which --tp 2 does not divide: pick a hidden size that is a "
        "multiple of 256"
    )
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    directory = tmp_path / "c" / "d"  # made with its parents, and again over itself
    assert config.write_bundled(directory, 256, 3, "bf16", 2, 10) == config.write_bundled(
        directory, 256, 3, "bf16", 2, 10
    )
    model = config.write_bundled(directory, 256, 3, "bf16", 2, 10)
    assert model == config.Model(directory, None, True, "LlamaForCausalLM", 256, 3)
    assert (directory / "config.json").read_text() == json.dumps(config.bundled_config(256, 3, "bf16", 10), indent=1)


def test_the_tiny_tokenizer_files(tmp_path: Path) -> None:
    assert config.write_tokenizer(tmp_path / "tok" / "en") == tmp_path / "tok" / "en"
    assert config.write_tokenizer(tmp_path / "tok") == tmp_path / "tok"
    assert config.write_tokenizer(tmp_path / "tok") == tmp_path / "tok"  # again, over itself
    assert (tmp_path / "tok" / "tokenizer.json").read_text() == json.dumps(config.tokenizer_json(), indent=1)
    assert (tmp_path / "tok" / "tokenizer_config.json").read_text().startswith('{\n "tokenizer_class"')
    tokenizer = json.loads((tmp_path / "tok" / "tokenizer.json").read_text())
    assert tokenizer == config.tokenizer_json()
    assert tokenizer["model"] == {
        "type": "WordLevel",
        "vocab": {
            "<unk>": 0,
            "<s>": 1,
            "</s>": 2,
            "the": 3,
            "capital": 4,
            "of": 5,
            "is": 6,
            "a": 7,
            "day": 8,
            "and": 9,
            "i": 10,
            "like": 11,
        },
        "unk_token": "<unk>",
    }
    assert tokenizer["added_tokens"][2] == {
        "id": 2,
        "content": "</s>",
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": True,
    }
    assert len(tokenizer["added_tokens"]) == 3
    assert (tokenizer["version"], tokenizer["truncation"], tokenizer["padding"]) == ("1.0", None, None)
    assert tokenizer["normalizer"] == {"type": "Lowercase"}
    assert tokenizer["pre_tokenizer"] == {"type": "Whitespace"}
    assert (tokenizer["post_processor"], tokenizer["decoder"]) == (None, None)
    assert json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text()) == {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "<unk>",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "model_max_length": 1 << 20,
    }


def _user(tmp_path: Path, data: object) -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(data))
    return model


def test_user_model_without_tokenizer_files_gets_the_tiny_one(tmp_path: Path) -> None:
    path = _user(tmp_path, {"model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 2})
    model = config.read_user(path, 2, tmp_path / "tok")
    assert model == config.Model(path, tmp_path / "tok", False, "qwen3", 1024, 2)
    assert (tmp_path / "tok" / "tokenizer.json").is_file()
    assert model.describe() == f"qwen3, hidden 1024, 2 layers (config.json of {path}; random weights)"


@pytest.mark.parametrize("name", config.TOKENIZER_FILES)
def test_any_tokenizer_file_is_the_models_own(tmp_path: Path, name: str) -> None:
    path = _user(tmp_path, {"architectures": ["A", "B"], "hidden_size": 8, "num_hidden_layers": 1})
    (path / name).write_text("{}")
    model = config.read_user(path, 1, tmp_path / "tok")
    assert (model.tokenizer, model.architecture) == (None, "A")
    assert not (tmp_path / "tok").exists()


def test_user_model_names_and_heads(tmp_path: Path) -> None:
    path = _user(tmp_path, {"hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 8})
    (path / "vocab.json").write_text("{}")
    assert config.read_user(path, 8, tmp_path / "t").architecture == "unknown"
    # a text_config without sizes is not the language model's: the top level's are read
    path = _user(
        tmp_path,
        {"hidden_size": 64, "num_hidden_layers": 3, "text_config": {"num_hidden_layers": 9}, "architectures": []},
    )
    assert (config.read_user(path, 3, tmp_path / "t").layers, config.read_user(path, 3, tmp_path / "t").hidden) == (
        3,
        64,
    )
    path = _user(tmp_path, {"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": "eight"})
    assert config.read_user(path, 3, tmp_path / "t").hidden == 64  # a head count that is not a number is not read


@pytest.mark.parametrize(
    "data",
    [
        {"hidden_size": 0, "num_hidden_layers": 2},
        {"hidden_size": 64, "num_hidden_layers": 0},
        {"hidden_size": "64", "num_hidden_layers": 2},
        {"hidden_size": 64, "num_hidden_layers": 2.0},
        {"num_hidden_layers": 2},
    ],
)
def test_user_config_without_usable_sizes(tmp_path: Path, data: dict[str, object]) -> None:
    path = _user(tmp_path, data)
    with pytest.raises(EnvironmentProblem) as raised:
        config.read_user(path, 1, tmp_path / "t")
    assert str(raised.value) == f"the model config {path / 'config.json'} has no hidden_size / num_hidden_layers"


def test_user_config_refusals_say_exactly_why(tmp_path: Path) -> None:
    def why(path: Path, tp: int = 4) -> str:
        with pytest.raises(EnvironmentProblem) as raised:
            config.read_user(path, tp, tmp_path / "t")
        return str(raised.value)

    assert why(tmp_path / "org" / "model") == (
        f"--model-path {tmp_path / 'org' / 'model'} is not a local directory: bench server reads only the "
        "config.json of a local model directory and downloads nothing"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    assert why(empty) == f"the model config {empty / 'config.json'} cannot be read: No such file or directory"
    path = _user(tmp_path, [1])
    assert why(path) == f"the model config {path / 'config.json'} is not a JSON object"
    (path / "config.json").write_text("{")
    assert why(path).startswith(f"the model config {path / 'config.json'} cannot be read: Expecting property name")
    (path / "config.json").write_bytes(b"\xff\xfe{")
    assert why(path).startswith(f"the model config {path / 'config.json'} cannot be read: 'utf-8' codec")
    _user(tmp_path, {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 6})
    assert why(path) == (
        f"the model in {path} has 6 attention heads, which --tp 4 does not divide: sglang cannot shard it"
    )
    assert config.read_user(path, 3, tmp_path / "t").hidden == 64


def test_the_bundled_config_json_holds_whole_numbers_rounded_up_to_256s(tmp_path: Path) -> None:
    # 4992 = 39 heads of 128; 4992 * 3.5 = 17472, rounded up to 256s: 17664 (69 x 256)
    config.write_bundled(tmp_path, 4992, 2, "bf16", 3, 10)
    text = (tmp_path / "config.json").read_text()
    assert '\n "intermediate_size": 17664,\n' in text
    assert '\n "num_attention_heads": 39,\n "num_key_value_heads": 39,\n' in text
    assert config.bundled_config(6016, 1, "bf16", 1)["intermediate_size"] == 21248  # 21056 rounded up


def test_the_smallest_sizes_a_user_config_may_have(tmp_path: Path) -> None:
    path = _user(tmp_path, {"hidden_size": 1, "num_hidden_layers": 1, "vocab_size": 2})
    (path / "tokenizer.json").write_text("{}")
    assert config.read_user(path, 1, tmp_path / "t") == config.Model(path, None, False, "unknown", 1, 1)


def test_a_user_config_is_read_as_utf8_whatever_the_locale(tmp_path: Path) -> None:
    path = _user(tmp_path, {})
    data = {"architectures": ["Modèle"], "hidden_size": 64, "num_hidden_layers": 2}
    (path / "config.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    previous = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")  # a locale whose encoding is ASCII
    try:
        model = config.read_user(path, 1, tmp_path / "t")
    finally:
        locale.setlocale(locale.LC_CTYPE, previous)
    assert model.architecture == "Modèle"
