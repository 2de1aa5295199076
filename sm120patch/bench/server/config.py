"""The model a server bench runs: always random weights (``--load-format dummy``), so nothing
is downloaded and no checkpoint is read.

* ``--model-path DIR``: the user's model directory; only its ``config.json`` is read (by us,
  to refuse what cannot work, and by sglang, to build the model).
* otherwise a small Llama-shaped dense model written to a scratch directory: the asked
  ``--hidden``, ``--layers`` layers, head size 128, 8 KV heads, 3.5x MLP, 32000-token
  vocabulary (bench_one_batch draws its input ids below 10000).

``bench_one_batch`` loads a tokenizer even for its synthetic prompts (``load_model`` calls
``get_tokenizer(server_args.tokenizer_path)`` in every release read; ``--skip-tokenizer-init``
does not reach that call).  A directory without tokenizer files gets a tiny word-level one
(``tokenizer.json`` + ``tokenizer_config.json``), passed as ``--tokenizer-path``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sm120patch.errors import EnvironmentProblem

HEAD_DIM = 128
KV_HEADS = 8
VOCAB = 32000
#: Files any of which means a directory has its own tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json", "tiktoken.model")
TORCH_DTYPE = {"bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True)
class Model:
    path: Path  # --model-path
    tokenizer: Path | None  # --tokenizer-path, where the model directory has no tokenizer
    bundled: bool
    architecture: str
    hidden: int
    layers: int

    def describe(self) -> str:
        origin = "bundled config" if self.bundled else f"config.json of {self.path}"
        return f"{self.architecture}, hidden {self.hidden}, {self.layers} layers ({origin}; random weights)"


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs keep the language model's sizes under ``text_config``."""
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) and "hidden_size" in inner else config


def has_tokenizer(path: Path) -> bool:
    return any((path / name).exists() for name in TOKENIZER_FILES)


def read_user(path: Path, tp: int, scratch_tokenizer: Path) -> Model:
    """The user's model directory as sglang will see it; EnvironmentProblem with one sentence
    when its config cannot be read or cannot be split over ``tp`` ranks.  Without tokenizer
    files there, the tiny tokenizer is written to ``scratch_tokenizer``."""
    config_path = path / "config.json"
    if not path.is_dir():
        raise EnvironmentProblem(
            f"--model-path {path} is not a local directory: bench server reads only the config.json "
            "of a local model directory and downloads nothing",
            code="usage",
        )
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise EnvironmentProblem(f"the model config {config_path} cannot be read: {why}", code="usage") from None
    if not isinstance(config, dict):
        raise EnvironmentProblem(f"the model config {config_path} is not a JSON object", code="usage")
    text = _text_config(config)
    hidden, layers = text.get("hidden_size"), text.get("num_hidden_layers")
    if not isinstance(hidden, int) or not isinstance(layers, int) or hidden <= 0 or layers <= 0:
        raise EnvironmentProblem(f"the model config {config_path} has no hidden_size / num_hidden_layers", code="usage")
    heads = text.get("num_attention_heads")
    if isinstance(heads, int) and heads % tp:
        raise EnvironmentProblem(
            f"the model in {path} has {heads} attention heads, which --tp {tp} does not divide: sglang cannot shard it",
            code="usage",
        )
    architectures = config.get("architectures") or [config.get("model_type") or "unknown"]
    tokenizer = None if has_tokenizer(path) else write_tokenizer(scratch_tokenizer)
    return Model(path, tokenizer, False, str(architectures[0]), hidden, layers)


def bundled_config(hidden: int, layers: int, dtype: str, max_len: int) -> dict[str, Any]:
    heads = hidden // HEAD_DIM
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": (hidden * 7 // 2 + 255) // 256 * 256,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": KV_HEADS if heads % KV_HEADS == 0 else heads,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": max(4096, max_len),
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "vocab_size": VOCAB,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "initializer_range": 0.02,
        "torch_dtype": TORCH_DTYPE[dtype],
    }


def write_bundled(directory: Path, hidden: int, layers: int, dtype: str, tp: int, max_len: int) -> Model:
    """The bundled model in ``directory`` (config.json and a tiny tokenizer)."""
    if hidden % HEAD_DIM:
        raise EnvironmentProblem(
            f"--hidden {hidden}: the bundled model needs a multiple of {HEAD_DIM} (head size)", code="usage"
        )
    heads = hidden // HEAD_DIM
    if heads % tp:
        raise EnvironmentProblem(
            f"--hidden {hidden} gives {heads} attention heads, which --tp {tp} does not divide: pick a hidden size "
            f"that is a multiple of {HEAD_DIM * tp}",
            code="usage",
        )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(bundled_config(hidden, layers, dtype, max_len), indent=1))
    write_tokenizer(directory)
    return Model(directory, None, True, "LlamaForCausalLM", hidden, layers)


def tokenizer_json() -> dict[str, Any]:
    """A word-level tokenizer of a few words (the ``tokenizers`` library's format)."""
    specials = ["<unk>", "<s>", "</s>"]
    words = [*specials, "the", "capital", "of", "is", "a", "day", "and", "i", "like"]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": token,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, token in enumerate(specials)
        ],
        "normalizer": {"type": "Lowercase"},
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(words)}, "unk_token": "<unk>"},
    }


def write_tokenizer(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer_json(), indent=1))
    (directory / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "unk_token": "<unk>",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "model_max_length": 1 << 20,
            },
            indent=1,
        )
    )
    return directory
