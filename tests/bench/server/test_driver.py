"""``bench server`` end to end through the CLI, on a fake serving interpreter: this
Python with FakeTorch, FakeFlashInfer and FakeSglang on its path (fakes.py).  The hook
(probes/server_hook.py as sitecustomize) runs for real in every process, TP ranks spawned
by multiprocessing included."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from sm120patch.bench.server import driver
from sm120patch.sglang.options import BACKEND, ENABLE, HATCH
from tests.bench.server.fakes import fake_server_site
from tests.support.cli import run

FAST = ["--output-len", "8", "--batch-sizes", "1,8", "--hidden", "1024", "--timeout", "20"]


def bench(package: Path, *args: str) -> tuple[int, dict[str, Any]]:
    code, stdout, _ = run("bench", "--server", "--sglang-path", str(package), "--json", *FAST, *args)
    return code, json.loads(stdout)


@pytest.mark.offline
def test_fusion_pays_each_run_proven(tmp_path: Path) -> None:
    code, data = bench(fake_server_site(tmp_path, gpus=2), "--tp", "2")
    assert code == 0, data
    assert data["verdict"]["kind"] == "pays"
    assert data["verdict"]["advice"].endswith(f"launch with `{BACKEND} trtllm`")
    assert data["flags"] == {"on": [BACKEND, "trtllm"], "off": [HATCH]}
    assert [(r["mode"], r["repeat"]) for r in data["runs"]] == [("off", 1), ("on", 1), ("on", 2), ("off", 2)]
    for one in data["runs"]:
        counts = one["counts"]
        assert counts["sglang_processes"] == 2  # both TP ranks imported sglang's fusion module
        if one["mode"] == "on":
            assert counts["ranks_with_fused_calls"] == 2
            assert counts["fused_kernel"] == {"eager": 2, "capture": 16, "fell_back": 0}  # 2 ranks x 2 sizes x 4
            assert counts["sglang_entry"]["capture"] == 16
            assert one["command"][-2:] == [BACKEND, "trtllm"]
        else:
            assert counts["ran"] is False and counts["fused_kernel"]["eager"] == 0
            assert one["command"][-1] == HATCH
        assert "--load-format" in one["command"] and "dummy" in one["command"]
        assert [m["batch_size"] for m in one["measurements"]] == [1, 8]
    row1, _ = data["rows"]
    assert row1["off_decode_ms"] == pytest.approx(10.16, abs=0.01)
    assert row1["on_decode_ms"] == pytest.approx(9.14, abs=0.01)
    assert row1["compare"] == "faster" and row1["noise_measured"] is True
    assert data["model"]["bundled"] is True and data["model"]["weights"].startswith("random")
    assert data["logs_kept"] is None
    # the kernel bench ran beside in this interpreter, which has no torch: its refusal is
    # said, and the server's answer above stands
    assert data["kernel"] == {
        "error": f"no kernel-level figures: torch does not import in {sys.executable} (ModuleNotFoundError: "
        "No module named 'torch'): bench runs in the interpreter that serves sglang (--python)"
    }


@pytest.mark.offline
def test_release_before_the_backend_option_uses_the_flag(tmp_path: Path) -> None:
    package = fake_server_site(tmp_path, gpus=1, options="enable+hatch", version="0.5.13", layout="bench_one_batch.py")
    code, data = bench(package, "--tp", "1", "--repeat", "1")
    assert code == 0, data
    assert data["sglang"]["benchmark"] == "sglang.bench_one_batch"
    assert data["flags"] == {"on": [ENABLE], "off": [HATCH]}
    assert any("noise is not measured" in note for note in data["notes"])


@pytest.mark.offline
def test_fallback_is_reported_with_sglangs_line_and_no_verdict(tmp_path: Path) -> None:
    os.environ["FAKE_SGLANG"] = "fallback"
    try:
        code, data = bench(fake_server_site(tmp_path), "--tp", "2")
    finally:
        del os.environ["FAKE_SGLANG"]
    assert code == 1
    assert data["verdict"]["kind"] == "none"
    problem = data["problems"][0]
    assert problem.startswith(f"fusion was asked for ({BACKEND} trtllm) but never ran: FlashInfer's workspace")
    assert "Disabling flashinfer allreduce fusion permanently" in problem
    on = data["runs"][1]
    assert on["counts"]["sglang_entry"]["fell_back"] == on["counts"]["sglang_entry"]["capture"] + 2
    assert len(data["runs"]) == 2  # stopped after the first pair
    assert data["logs_kept"] and Path(data["logs_kept"], "fusion-1.log").is_file()


@pytest.mark.offline
def test_off_run_fused_by_an_auto_enable_without_hatch(tmp_path: Path) -> None:
    os.environ["FAKE_SGLANG_AUTO_ENABLE"] = "1"
    try:
        code, data = bench(fake_server_site(tmp_path, gpus=1, options="enable", version="0.5.9"), "--tp", "1")
    finally:
        del os.environ["FAKE_SGLANG_AUTO_ENABLE"]
    assert code == 1
    assert data["problems"][0].startswith("the fusion-off run (no fusion option")
    assert "sglang turned fusion on by itself" in data["problems"][0]


@pytest.mark.offline
def test_a_crash_with_fusion_on_is_exit_1_with_sglangs_line(tmp_path: Path) -> None:
    os.environ["FAKE_SGLANG"] = "crash-on"
    try:
        code, data = bench(fake_server_site(tmp_path, gpus=1), "--tp", "1")
    finally:
        del os.environ["FAKE_SGLANG"]
    assert code == 1
    assert "Capture cuda graph failed" in data["problems"][0]
    assert data["runs"][1]["error"]


@pytest.mark.offline
def test_tp1_checks_the_harness_and_gives_no_verdict(tmp_path: Path) -> None:
    code, data = bench(fake_server_site(tmp_path, gpus=1), "--tp", "1", "--repeat", "1")
    # FakeSglang calls the entry at TP 1 too, so the harness sees calls: the run is proven
    assert code == 0, data
    assert any("TP 1 has no allreduce" in note for note in data["notes"])


@pytest.mark.offline
def test_a_user_model_dir_without_tokenizer_gets_the_tiny_one(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Qwen3ForCausalLM"],
                "hidden_size": 2048,
                "num_hidden_layers": 2,
                "num_attention_heads": 16,
            }
        )
    )
    package = fake_server_site(tmp_path / "site", gpus=1)
    code, data = bench(package, "--tp", "1", "--repeat", "1", "--model-path", str(model))
    assert code == 0, data
    assert data["model"]["architecture"] == "Qwen3ForCausalLM" and data["model"]["bundled"] is False
    command = data["runs"][0]["command"]
    assert command[command.index("--model-path") + 1] == str(model)
    assert "--tokenizer-path" in command


def refused(package: Path, *args: str) -> str:
    code, data = bench(package, *args)
    assert code == 2, data
    assert data["ok"] is False
    return str(data["error"])


@pytest.mark.offline
def test_refusals(tmp_path: Path) -> None:
    assert "sees no CUDA GPU" in refused(fake_server_site(tmp_path / "a", gpus=0))
    assert refused(fake_server_site(tmp_path / "b", gpus=2), "--tp", "4").startswith("--tp 4 needs 4 GPUs")
    busy = refused(fake_server_site(tmp_path / "c", free_gib=10.0), "--tp", "2")
    assert busy.startswith("GPU 0 (NVIDIA RTX PRO 6000 Blackwell Workstation Edition) has 10.0 of 95.0 GiB free")
    assert "has no bench_one_batch" in refused(fake_server_site(tmp_path / "d", layout=""), "--tp", "2")
    assert "older than the fusion" in refused(fake_server_site(tmp_path / "e", options="none"), "--tp", "2")
    package = fake_server_site(tmp_path / "f")
    assert "cannot be read" in refused(package, "--tp", "2", "--model-path", str(tmp_path))
    assert "is not a local directory" in refused(package, "--tp", "2", "--model-path", "org/model")
    assert "does not divide" in refused(package, "--tp", "2", "--hidden", "384")
    assert "must not set fusion" in refused(package, "--server-arg", "--enable-flashinfer-allreduce-fusion")


@pytest.mark.offline
def test_a_smaller_mem_fraction_lets_a_busy_gpu_through(tmp_path: Path) -> None:
    package = fake_server_site(tmp_path, free_gib=50.0, gpus=1)
    code, data = bench(package, "--tp", "1", "--repeat", "1", "--server-arg=--mem-fraction-static=0.4")
    assert code == 0, data
    assert data["runs"][0]["command"][-1] == "--mem-fraction-static=0.4"


@pytest.mark.offline
def test_an_off_run_that_fails_is_exit_2_with_the_log_kept(tmp_path: Path) -> None:
    error = refused(fake_server_site(tmp_path, gpus=1), "--tp", "1", "--server-arg=--no-such-option")
    assert error.startswith("bench server stopped in run 1/4, default: sglang's benchmark ended with exit 2")
    assert "unrecognized arguments: --no-such-option" in error
    assert "the log is in" in error


def test_options_of_the_other_bench_are_refused(tmp_path: Path) -> None:
    package = fake_server_site(tmp_path)
    code, _, err = run("bench", "server", "--sglang-path", str(package), "--tokens", "1,2")
    assert code == 2 and "--tokens belongs to `bench kernel`" in err
    code, _, err = run("bench", "kernel", "--batch-sizes", "1,2")
    assert code == 2 and "--batch-sizes belongs to `bench server`" in err
    code, _, err = run("bench", "kernel", "--no-such-option")
    assert code == 2 and "No such option '--no-such-option'" in err  # an option of neither: click's words
    code, _, err = run("bench", "kernel", "--tp", "1")
    assert code == 2 and "--tp 1 only with `bench server`" in err


@pytest.mark.offline
def test_text_output_piped_has_80_column_tables_and_whole_sentences_at_the_tp_of_every_visible_gpu(
    tmp_path: Path,
) -> None:
    """Without ``--tp`` the benchmark runs on every GPU it sees (two here)."""
    package = fake_server_site(tmp_path, gpus=2)
    code, _, err = run(
        "bench", "--server", "--sglang-path", str(package), "--repeat", "1", *FAST, env={"COLUMNS": "60"}
    )  # fmt: skip
    assert code == 0, err
    lines = err.splitlines()
    table = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert table and max(len(line) for line in table) <= 80
    assert any(
        line.startswith("fusion pays in sglang's own decode at TP 2") and "launch with" in line for line in lines
    ), err
    assert any("on vs" in line for line in table)  # the table, at the width COLUMNS gives
    assert "nothing downloaded" in err
    assert "fusion pays in sglang's own decode at TP 2" in " ".join(lines)


@pytest.mark.offline
def test_more_results_than_asked_for_is_a_run_that_could_not_be_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each block of sglang's output is named by the sweep it was asked for; one block more
    (another benchmark writing to the same log) is not read as a measurement."""
    monkeypatch.setenv("FAKE_SGLANG", "extra-result")
    code, data = bench(fake_server_site(tmp_path, gpus=1), "--tp", "1", "--repeat", "1")
    assert code == 1
    assert data["problems"][0].startswith(
        "the default run failed: its output could not be read: more results than the 2 asked for: "
    )


@pytest.mark.offline
def test_a_batch_size_sglang_skips_is_named_and_left_out(tmp_path: Path) -> None:
    code, data = bench(fake_server_site(tmp_path, gpus=1), "--tp", "1", "--repeat", "1", "--batch-sizes", "1,1024")
    assert code == 0, data
    assert [row["batch_size"] for row in data["rows"]] == [1]
    assert "batch 1024 was skipped by sglang: it does not fit in the KV cache (max batch size limit)" in data["notes"]


def test_the_free_memory_a_run_needs_follows_its_mem_fraction() -> None:
    assert driver.required_free(("--disable-cuda-graph", "--mem-fraction-static", "0.5")) == 0.55
    assert driver.required_free(("--mem-fraction-static=0.7",)) == 0.75
    assert driver.required_free(("--mem-fraction-static", "x")) == driver.MIN_FREE_FRACTION
    assert driver.required_free(("--mem-fraction-static",)) == driver.MIN_FREE_FRACTION


def test_the_benchmarks_python_prints_unbuffered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its lines reach the watchdog as printed, not when a buffer fills (a phase would look stuck)."""
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    assert driver.probe_env(fake_server_site(tmp_path))["PYTHONUNBUFFERED"] == "1"


@pytest.mark.offline
def test_a_scratch_folder_that_cannot_be_removed_does_not_change_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    removed: list[Path] = []
    real_rmtree = driver.shutil.rmtree

    def refusing_rmtree(path: Path, ignore_errors: bool = False, **kwargs: Any) -> None:
        """Fake ``shutil.rmtree`` for the run's scratch folder, on a filesystem that refuses
        the removal (a busy mount): as the real one, it raises unless told to ignore errors.
        Other folders (the kernel bench's, tempfile's own) are removed for real."""
        if not Path(path).name.startswith("sm120patch-bench-server-"):
            return real_rmtree(path, ignore_errors, **kwargs)
        removed.append(Path(path))
        if not ignore_errors:
            raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(driver.shutil, "rmtree", refusing_rmtree)
    code, data = bench(fake_server_site(tmp_path, gpus=1), "--tp", "1", "--repeat", "1")
    assert code == 0, data
    assert len(removed) == 1


@pytest.mark.offline
def test_at_tp1_a_fusion_on_run_that_never_fused_says_there_is_no_allreduce(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SGLANG", "tp1-no-entry")
    code, data = bench(fake_server_site(tmp_path, gpus=1), "--tp", "1", "--repeat", "1")
    assert code == 1
    assert data["problems"][0].endswith("but never ran: at TP 1 there is no allreduce to fuse")


GATE = """\
FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048


def apply_flashinfer_allreduce_fusion(batch_size):
    return (_is_sm90_supported or _is_sm100_supported) and 0 < batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE


_is_sm90_supported = _is_sm100_supported = True
"""


@pytest.mark.offline
def test_three_settings_off_sglangs_limit_and_the_limit_asked(tmp_path: Path) -> None:
    """The fake's gate obeys its limit at prefill (batch x input tokens), where fusion costs 20 %:
    sglang's limit fuses the 8 x 64 prefill (512 tokens), --fuse-up-to 256 does not."""
    package = fake_server_site(tmp_path, gpus=2, gate=GATE)
    code, data = bench(
        package, "--tp", "2", "--repeat", "1", "--batch-sizes", "8,64", "--input-len", "64", "--fuse-up-to", "256"
    )
    assert code == 0, data
    assert [r["mode"] for r in data["runs"]] == ["off", "on", "limit"]
    limits = {r["mode"]: r["counts"].get("token_limits") for r in data["runs"]}
    assert limits == {"off": None, "on": [2048], "limit": [256]}  # set in every process by the hook
    three = data["three_settings"]
    assert (three["sglang_limit"], three["fuse_up_to"]) == (2048, 256)
    small, large = three["rows"]
    assert (small["prefill_tokens"], large["prefill_tokens"]) == (512, 4096)
    assert small["prefill_ms"]["on"] == pytest.approx(1.2 * small["prefill_ms"]["off"])  # 512 <= 2048: fused
    assert small["prefill_ms"]["limit"] == pytest.approx(small["prefill_ms"]["off"])  # 512 > 256: not
    assert large["prefill_ms"]["on"] == pytest.approx(large["prefill_ms"]["off"])  # above 2048: unfused
    assert small["decode_ms"]["limit"] == pytest.approx(small["decode_ms"]["on"])
    assert (package / "srt/layers/communicator.py").read_text() == GATE  # the tree is not touched


def test_three_settings_refuse_a_limit_above_sglangs_and_a_release_without_one(tmp_path: Path) -> None:
    code, data = bench(fake_server_site(tmp_path / "a", gate=GATE), "--tp", "2", "--fuse-up-to", "4096")
    assert code == 2 and "above sglang 0.5.14's own limit of 2048 tokens" in data["error"]
    code, data = bench(fake_server_site(tmp_path / "b"), "--tp", "2", "--fuse-up-to", "512")
    assert code == 2 and data["error"] == "--fuse-up-to: sglang 0.5.14 has no fusion token limit to lower"


@pytest.mark.offline
def test_three_settings_as_text_side_by_side(tmp_path: Path) -> None:
    package = fake_server_site(tmp_path, gpus=1, gate=GATE)
    args = ["--tp", "1", "--repeat", "1", "--batch-sizes", "8", "--input-len", "64", "--fuse-up-to", "256"]
    code, _, err = run("bench", "--server", "--sglang-path", str(package), *FAST[:2], "--timeout", "20", *args)
    assert code == 0, err
    flat = " ".join(err.split())
    assert "three settings: off / on up to sglang's 2048 / on up to 256 tokens" in flat
    assert "│ 8 │ 512 │ 160 / 192 / 160 │" in flat  # prefill ms: off / sglang's limit / 256
    assert "fusion limit: fused kernel called" in flat
