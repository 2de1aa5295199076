"""`sm120patch bench kernel` from the command line: usage, and every host it must refuse (exit 2,
one sentence, JSON on stdout, never a traceback).  The serving interpreter is this one,
with FakeTorch / FakeFlashInfer (tests/bench/fakes.py) on its path.  The command runs in
this process (its rank probe in a new one), and once in a process of its own."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.bench.fakes import H200, RTX_PRO_6000, fake_serving_site
from tests.support.cli import process_env, run, run_process

REPO = Path(__file__).resolve().parents[2]


def bench(
    *args: str, site: Path | None = None, json_out: bool = True, process: bool = False
) -> tuple[int, dict | None, str]:
    """``sm120patch bench kernel --python THIS ARGS``: in this process, or with ``process`` in a new
    one; the rank probe runs in a new process either way, with FakeTorch (``site``) as its
    only PYTHONPATH and no CUDA_VISIBLE_DEVICES.  Never a traceback."""
    argv = ["bench", "kernel", "--python", sys.executable, *args] + (["--json"] if json_out else [])
    if process:
        env = process_env(drop=["PYTHONPATH", "CUDA_VISIBLE_DEVICES"], **({"PYTHONPATH": str(site)} if site else {}))
        proc = run_process(*argv, env=env, cwd=REPO, timeout=120)
        code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    else:
        code, stdout, stderr = run(*argv, env={"PYTHONPATH": str(site) if site else None, "CUDA_VISIBLE_DEVICES": None})
    assert "Traceback" not in stderr, stderr
    return code, json.loads(stdout) if json_out and stdout else None, stderr


def refused(site: Path, *args: str) -> str:
    code, data, _ = bench(*args, site=site)
    assert code == 2 and data is not None
    assert data["ok"] is False and data["exit_code"] == 2
    return data["error"]


@pytest.mark.offline
def test_no_torch(tmp_path: Path) -> None:
    code, data, _ = bench("--tp", "2")  # this interpreter has no torch
    assert code == 2 and data is not None
    assert data["error"].startswith(f"torch does not import in {sys.executable} (ModuleNotFoundError")
    assert data["error"].endswith("bench runs in the interpreter that serves sglang (--python)")


@pytest.mark.offline
def test_no_gpu(tmp_path: Path) -> None:
    error = refused(fake_serving_site(tmp_path, []), "--tp", "2")
    assert error == f"torch 2.11.0+fake in {sys.executable} sees no CUDA GPU: nothing to measure"


@pytest.mark.offline
def test_fewer_gpus_than_tp(tmp_path: Path) -> None:
    error = refused(fake_serving_site(tmp_path, [RTX_PRO_6000] * 2), "--tp", "8")
    assert error.startswith(f"--tp 8 needs 8 GPUs; torch in {sys.executable} sees 2 (GPU 0: NVIDIA RTX PRO 6000")


@pytest.mark.offline
def test_a_tp_the_kernel_does_not_take(tmp_path: Path) -> None:
    site = fake_serving_site(tmp_path, [RTX_PRO_6000] * 8)
    assert refused(site, "--tp", "6") == (
        "FlashInfer's trtllm fused allreduce runs on 2, 4, 8, 16 ranks only ('unsupported ranks number'), so "
        "sglang cannot fuse at TP 6: --tp 6 has nothing to measure"
    )


@pytest.mark.offline
def test_every_visible_gpu_when_that_count_is_not_a_kernel_world(tmp_path: Path) -> None:
    site = fake_serving_site(tmp_path, [RTX_PRO_6000] * 3)
    assert refused(site).endswith("sglang cannot fuse at TP 3: 3 GPUs are visible; --tp 3 has nothing to measure")


@pytest.mark.offline
def test_one_gpu_and_no_tp(tmp_path: Path) -> None:
    error = refused(fake_serving_site(tmp_path, [H200]))
    assert error == "one GPU is visible to torch: an allreduce needs --tp 2 or more GPUs (GPU 0: NVIDIA H200)"


@pytest.mark.offline
def test_no_flashinfer(tmp_path: Path) -> None:
    error = refused(fake_serving_site(tmp_path, [RTX_PRO_6000] * 2, flashinfer=None), "--tp", "2")
    assert error.startswith(f"FlashInfer does not import in {sys.executable} (ModuleNotFoundError")
    assert error.endswith("there is no fused kernel to measure")


@pytest.mark.offline
def test_flashinfer_without_the_unified_api(tmp_path: Path) -> None:
    site = fake_serving_site(tmp_path, [H200] * 2, flashinfer=("0.2.9", [9, 10]), unified_api=False)
    assert refused(site) == (
        "FlashInfer 0.2.9 has no create_allreduce_fusion_workspace/allreduce_fusion: bench needs FlashInfer 0.6.17 "
        "or newer"
    )


@pytest.mark.offline
def test_flashinfer_without_the_sm12x_kernel_on_sm12x_gpus(tmp_path: Path) -> None:
    site = fake_serving_site(tmp_path, [RTX_PRO_6000] * 2, flashinfer=("0.6.3", [9, 10]))
    error = refused(site, "--tp", "2")
    assert error.startswith(
        "FlashInfer 0.6.3 builds its trtllm allreduce for SM [9, 10] only, and these GPUs are SM [12]"
    )
    assert error.endswith("upgrade to flashinfer-python>=0.6.17")


@pytest.mark.offline
def test_the_same_flashinfer_is_no_refusal_on_hopper(tmp_path: Path) -> None:
    """Past the kernel check, to the P2P one: the SM [9, 10] build serves SM90."""
    site = fake_serving_site(tmp_path, [H200] * 2, p2p=False, flashinfer=("0.6.3", [9, 10]))
    assert refused(site, "--tp", "2").startswith("no P2P access from GPU 0 to GPU 1")


@pytest.mark.offline
def test_no_p2p(tmp_path: Path) -> None:
    error = refused(fake_serving_site(tmp_path, [RTX_PRO_6000] * 2, p2p=False), "--tp", "2")
    assert error == (
        "no P2P access from GPU 0 to GPU 1 (torch.cuda.can_device_access_peer): FlashInfer's trtllm allreduce "
        "needs P2P between every pair, so fusion cannot run on this host"
    )


@pytest.mark.offline
def test_a_refusal_without_json_is_one_line_on_stderr(tmp_path: Path) -> None:
    code, _, err = bench("--tp", "2", site=fake_serving_site(tmp_path, []), json_out=False, process=True)
    assert code == 2
    assert err.strip().splitlines() == [
        f"error: [bench-host] torch 2.11.0+fake in {sys.executable} sees no CUDA GPU: nothing to measure"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tp", "1"], "1 is not in the range x>=2"),
        (["--tokens", "0,8"], "token counts go from 1 to 2048"),
        (["--tokens", "4096"], "token counts go from 1 to 2048"),
        (["--tokens", "a,b"], "is not a comma-separated list of token counts"),
        (["--hidden", "100"], "the hidden size must be a positive multiple of 8"),
        (["--dtype", "fp8"], "'fp8' is not one of 'bf16', 'fp16'"),
        (["--replays", "5"], "5 is not in the range x>=30"),
    ],
)
def test_usage_errors_exit_2_and_say_why(args: list[str], message: str) -> None:
    code, _, err = bench(*args, json_out=False)
    assert code == 2
    assert message in err


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("{tmp}/plot.pdf", "{tmp}/plot.pdf: the file must end in .png or .svg"),
        ("", "'' names no file: give FILE.png or FILE.svg"),
        (".png", "'.png' names no file: give FILE.png or FILE.svg"),
        ("{tmp}/no/such/dir/x.png", "{tmp}/no/such/dir/x.png: the folder {tmp}/no/such/dir does not exist"),
    ],
)
def test_a_plot_that_cannot_be_drawn_is_refused_before_anything_runs(tmp_path: Path, target: str, says: str) -> None:
    """Refused as a usage error, before sglang is looked for or a rank started: one JSON object."""
    code, data, _ = bench("--plot", target.format(tmp=tmp_path))
    assert code == 2 and data is not None
    assert data["error"] == f"Invalid value for '--plot': {says.format(tmp=tmp_path)}"


def test_a_token_list_with_an_empty_item_is_refused() -> None:
    code, data, _ = bench("--tokens", "1,,2")
    assert code == 2 and data is not None
    assert data["error"] == "Invalid value for '--tokens': '1,,2' has an empty item: give comma-separated whole numbers"
