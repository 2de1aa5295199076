"""The per-step estimate: a model's sites, where fusion applies, and reading its config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sm120patch.bench import estimate
from sm120patch.bench.estimate import Model, read_config, steps, summary
from sm120patch.errors import EnvironmentProblem

DENSE = Model(32, 4096, False, "test")


def write(tmp_path: Path, config: object) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_fusion_applies_up_to_2048_tokens_and_not_above() -> None:
    found = steps(DENSE, [(2048, 100.0, 150.0), (4096, 200.0, 300.0), (1, 5.0, 20.0)])
    assert [(s.tokens, s.fused_applies) for s in found] == [(1, True), (2048, True), (4096, False)]
    over = found[-1]
    assert over.off_us == over.on_us == 64 * 300.0 and over.saved_us == 0.0
    assert found[0].saved_us == 64 * 15.0 and found[0].saved_pct == 75.0


def test_the_summary_says_both_gain_and_cost() -> None:
    found = steps(DENSE, [(1, 5.0, 20.0), (1024, 130.0, 100.0)])
    text = summary(DENSE, found)
    assert text.startswith("32 layers (dense model, hidden 4096): 64 allreduce + add + RMSNorm sites a step")
    assert text.endswith("saves up to 960 µs a step (75 %, 1 tokens); costs up to 1,920 µs a step (30 %, 1024 tokens)")


def test_a_deepseek_config_is_moe_with_its_layers_and_hidden(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "architectures": ["DeepseekV3ForCausalLM"],
            "num_hidden_layers": 61,
            "hidden_size": 7168,
            "n_routed_experts": 256,
        },
    )
    assert read_config(tmp_path) == Model(61, 7168, True, f"{path} (DeepseekV3ForCausalLM)")


def test_a_multimodal_config_reads_its_text_model(tmp_path: Path) -> None:
    write(tmp_path, {"architectures": ["X"], "text_config": {"num_hidden_layers": 48, "hidden_size": 5120}})
    model = read_config(tmp_path / "config.json")
    assert (model.layers, model.hidden, model.moe) == (48, 5120, False)


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"hidden_size": 4096}, "names no layer count"),
        ([1, 2], "holds no JSON object"),
        ({"num_hidden_layers": True, "hidden_size": 4096}, "names no layer count"),
    ],
)
def test_a_config_it_cannot_use_is_one_sentence(tmp_path: Path, config: object, says: str) -> None:
    write(tmp_path, config)
    with pytest.raises(EnvironmentProblem, match=says):
        read_config(tmp_path)


def test_a_config_that_is_not_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(EnvironmentProblem, match=f"--model-config {path} is not JSON"):
        read_config(path)


def test_sites_are_two_a_layer() -> None:
    assert Model(78, 7168, True, "x").sites == 156 == 2 * 78
    assert estimate.FUSION_MAX_TOKENS == 2048
