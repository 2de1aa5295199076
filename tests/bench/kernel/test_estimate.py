"""The per-step estimate: a model's sites, where fusion applies, and reading its config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sm120patch.bench.kernel import estimate
from sm120patch.bench.kernel.estimate import Model, read_config, steps, summary
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
    assert text.endswith("saves up to 960 µs a step (75 %, 1 token); costs up to 1,920 µs a step (30 %, 1024 tokens)")


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


def test_the_summary_of_a_model_said_by_flags_with_no_rows_is_its_sites_alone() -> None:
    model = Model(78, 7168, None, "--layers/--hidden")
    assert summary(model, []) == (
        "78 layers (a model, hidden 7168): 156 allreduce + add + RMSNorm sites a step; fusion on runs them as "
        "156 fused kernels instead of 156 allreduces and 156 norm kernels, up to 2048 tokens a batch (unfused above)"
    )


def test_the_summary_of_a_moe_model_that_only_gains_says_no_cost() -> None:
    model = Model(2, 1024, True, "x")
    text = summary(model, steps(model, [(1, 10.0, 20.0), (8, 15.0, 20.0), (4096, 500.0, 600.0)]))
    assert text == (
        "2 layers (MoE model, hidden 1024): 4 allreduce + add + RMSNorm sites a step; fusion on runs them as "
        "4 fused kernels instead of 4 allreduces and 4 norm kernels, up to 2048 tokens a batch (unfused above); "
        "saves up to 40 µs a step (50 %, 1 token)"
    )


def test_the_summary_of_a_model_that_only_loses_says_no_saving_and_even_says_neither() -> None:
    lose = steps(DENSE, [(1, 30.0, 20.0), (16, 25.0, 20.0)])
    assert summary(DENSE, lose).endswith(
        "up to 2048 tokens a batch (unfused above); costs up to 640 µs a step (50 %, 1 token)"
    )
    even = steps(DENSE, [(1, 20.0, 20.0), (4096, 1.0, 2.0)])
    assert summary(DENSE, even) == summary(DENSE, [])


def test_a_step_of_no_tokens_is_not_fused_and_a_step_of_no_time_saves_no_percent() -> None:
    (step,) = steps(DENSE, [(0, 1.0, 2.0)])
    assert step == estimate.Step(0, False, 128.0, 128.0)
    assert estimate.Step(1, True, 0.0, 0.0).saved_pct == 0.0
    assert estimate.Step(1, True, 200.0, 150.0).saved_pct == 25.0


def test_the_first_key_that_holds_a_count_wins(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "num_hidden_layers": "61",
            "n_layer": 12,
            "num_layers": 99,
            "hidden_size": None,
            "n_embd": 768,
            "d_model": 1,
            "n_routed_experts": True,
            "num_local_experts": 8,
            "num_experts": 1,
            "architectures": [7],
        },
    )
    assert read_config(tmp_path) == Model(12, 768, True, f"{tmp_path / 'config.json'} (model)")


@pytest.mark.parametrize(
    ("config", "moe", "name"),
    [
        ({"num_experts": 1}, False, "model"),
        ({"moe_num_experts": 2}, True, "model"),
        ({"architectures": []}, False, "model"),
        ({"architectures": ["LlamaForCausalLM", "Other"]}, False, "LlamaForCausalLM"),
    ],
)
def test_one_expert_is_dense_and_the_name_is_the_first_architecture(
    tmp_path: Path, config: dict[str, object], moe: bool, name: str
) -> None:
    path = write(tmp_path, {"num_layers": 4, "d_model": 64, **config})
    assert read_config(path) == Model(4, 64, moe, f"{path} ({name})")


def test_a_text_config_does_not_override_a_top_level_layer_count(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {"num_hidden_layers": 10, "hidden_size": 100, "text_config": {"num_hidden_layers": 48, "hidden_size": 5120}},
    )
    assert read_config(path) == Model(10, 100, False, f"{path} (model)")
    write(tmp_path, {"hidden_size": 100, "text_config": {"num_hidden_layers": 48, "num_experts": 4}})
    assert read_config(path) == Model(48, 100, True, f"{path} (model)")
    write(tmp_path, {"num_hidden_layers": 10, "text_config": ["not", "a", "dict"]})
    with pytest.raises(EnvironmentProblem, match="names no layer count"):
        read_config(path)


@pytest.mark.parametrize(
    "config",
    [
        {"num_hidden_layers": 0, "hidden_size": 4096},
        {"num_hidden_layers": 4, "hidden_size": 0},
        {"num_hidden_layers": -1, "hidden_size": 4096},
        {"num_hidden_layers": 4, "hidden_size": -8},
        {"num_hidden_layers": 4},
    ],
)
def test_a_layer_count_or_hidden_size_under_one_is_refused_with_the_whole_sentence(
    tmp_path: Path, config: dict[str, object]
) -> None:
    path = write(tmp_path, config)
    with pytest.raises(EnvironmentProblem) as raised:
        read_config(tmp_path)
    assert str(raised.value) == (
        f"--model-config {path} names no layer count (num_hidden_layers/n_layer/num_layers) and hidden size "
        "(hidden_size/n_embd/d_model): give --layers and --hidden instead"
    )


def test_a_missing_config_names_the_file_and_why(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentProblem) as raised:
        read_config(tmp_path / "nowhere.json")
    assert str(raised.value) == f"--model-config {tmp_path / 'nowhere.json'}: No such file or directory"
    with pytest.raises(EnvironmentProblem) as raised:
        read_config(tmp_path)
    assert str(raised.value) == f"--model-config {tmp_path / 'config.json'}: No such file or directory"


def test_a_config_not_in_utf8_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b'{"num_layers": 2, "d_model": 8, "architectures": ["\xe9"]}')
    with pytest.raises(EnvironmentProblem, match=f"--model-config {path} is not JSON: 'utf-8' codec"):
        read_config(path)


def test_a_config_that_is_a_list_says_so_whole(tmp_path: Path) -> None:
    path = write(tmp_path, [1])
    with pytest.raises(EnvironmentProblem) as raised:
        read_config(path)
    assert str(raised.value) == f"--model-config {path} holds no JSON object"


def test_one_layer_of_hidden_size_one_is_still_a_model(tmp_path: Path) -> None:
    path = write(tmp_path, {"n_layer": 1, "n_embd": 1})
    assert read_config(path) == Model(1, 1, False, f"{path} (model)")


def test_a_saving_under_one_microsecond_is_still_said() -> None:
    text = summary(DENSE, steps(DENSE, [(1, 20.0, 20.01)]))
    assert text.endswith("(unfused above); saves up to 1 µs a step (0 %, 1 token)")
