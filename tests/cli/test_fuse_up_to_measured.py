"""``apply --fuse-up-to measured`` beyond the crossover of the recorded H200 run: a result where
fusion wins at every size or at none, one against several stand-ins, one of other GPUs, a
saved file that cannot be read; the date verify and the JSON give for the result; the
smallest limit and the sentence for a limit above sglang's; which GPUs ``measured`` compares."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from sm120patch.bench import fuse_limit
from sm120patch.bench.kernel import saved
from sm120patch.runner import gpus
from sm120patch.runner.gpus import Gpu, GpuReport
from sm120patch.sglang.tree import from_directory
from tests.cli.test_fuse_up_to import BENCH, LIMITED, as_sglangs, hashes, limit_line
from tests.support.cli import jrun, run
from tests.support.mini_sglang import COMM, FILES, write_mini_sglang

H200 = "NVIDIA H200"


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """The miniature release with sglang's token limit of 2048."""
    return write_mini_sglang(tmp_path / "site", files={**FILES, COMM: LIMITED})


def save_result(package: Path, data: dict, drop: tuple[str, ...] = (), **changes: object) -> None:
    """``data`` as this tree's last bench result, measured here (or as ``changes`` say); the
    facts named in ``drop`` left out, as an older bench may have written it."""
    tree = from_directory(package)
    facts = {k: v for k, v in saved.identity(tree, data).items() if k not in drop}
    facts.update(changes)
    saved.path(tree).parent.mkdir(parents=True, exist_ok=True)
    saved.path(tree).write_text(json.dumps(dict(data, saved=facts)))


def recorded(fused_per_unfused: float | None = None) -> dict:
    """The H200 run in docs/bench against sglang's own unfused path (fusion wins up to 512
    tokens); ``fused_per_unfused``: every row's unfused side costing the fused one times it."""
    data = as_sglangs(json.loads(BENCH.read_text()))
    if fused_per_unfused is not None:
        rows = [dict(r, unfused={k: v * fused_per_unfused for k, v in r["fused"].items()}) for r in data["rows"]]
        data = dict(data, rows=rows)
    return data


def said(err: str) -> str:
    return " ".join(err.split())


def measured(package: Path, *more: str) -> tuple[int, str, str]:
    return run("apply", "--sglang-path", str(package), "--fuse-up-to", "measured", "--tp", "2", *more)


def test_a_result_where_fusion_wins_at_every_size_keeps_sglangs_own_limit(package: Path) -> None:
    save_result(package, recorded(fused_per_unfused=2.0))
    code, out = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "measured", "--tp", "2")
    assert code == 0, out
    assert limit_line(package) == "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048"
    asked = out["token_limit"]["asked"]
    assert (asked["limit"], asked["source"]) == (2048, "measured")


def test_a_result_where_fusion_always_wins_refuses_a_release_without_a_limit(tmp_path: Path) -> None:
    unlimited = write_mini_sglang(tmp_path / "site")
    save_result(unlimited, recorded(fused_per_unfused=2.0))
    before = hashes(unlimited)
    code, _, err = measured(unlimited)
    assert code == 2 and hashes(unlimited) == before
    assert said(err).endswith(
        "error: [no-measurement] --fuse-up-to measured: fusion won at every measured size and sglang 0.5.11 has no "
        "limit of its own to keep"
    )


def test_a_result_where_fusion_never_wins_says_to_keep_fusion_off(package: Path) -> None:
    save_result(package, recorded(fused_per_unfused=0.5))
    before = hashes(package)
    code, _, err = measured(package)
    assert code == 2 and hashes(package) == before
    text = said(err)
    assert text.startswith(
        "error: [no-measurement] --fuse-up-to measured: fusion did not win at any size in the saved bench result ("
    )
    assert text.endswith("); keep fusion off instead")


def test_a_result_against_stand_ins_names_each_reason_and_what_to_do(package: Path) -> None:
    why = ["sglang does not import in /env/bin/python", "this FlashInfer has no sglang wrapper"]
    data = dict(recorded(), baseline={"source": "torch", "indicative": True, "why": why})
    save_result(package, data)
    code, _, err = measured(package)
    assert code == 2
    assert said(err).endswith(
        "error: [no-measurement] --fuse-up-to measured: the saved bench result is indicative only, "
        "its unfused side ran stand-ins "
        "(sglang does not import in /env/bin/python; this FlashInfer has no sglang wrapper), so its crossover is "
        "not sglang's; run `sm120patch bench kernel` where sglang imports (the baseline is then sglang's own code), or "
        "give the limit as --fuse-up-to N"
    )


def test_a_result_of_other_gpus_is_refused_even_with_tp(package: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--tp says the TP, not the GPUs: a TP-2 result of two H200s is not taken on two other GPUs."""
    save_result(package, recorded())
    monkeypatch.setattr(fuse_limit, "_gpus", lambda: ["NVIDIA RTX PRO 6000 Blackwell"] * 2)
    code, _, err = measured(package)
    assert code == 2
    assert said(err).endswith(
        f"the saved bench result was measured on {H200}, {H200}, not on this host's GPUs "
        "(NVIDIA RTX PRO 6000 Blackwell, NVIDIA RTX PRO 6000 Blackwell); run `sm120patch bench kernel` again"
    )
    monkeypatch.setattr(fuse_limit, "_gpus", lambda: [H200] * 2)
    assert measured(package)[0] == 0


def test_the_results_day_is_what_verify_and_the_json_give(package: Path) -> None:
    save_result(package, recorded(), date="2026-12-03T14:05:09+0100")
    code, out = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "measured", "--tp", "2")
    assert code == 0, out
    assert out["token_limit"]["asked"]["date"] == "2026-12-03"
    notes = jrun("verify", "--sglang-path", str(package))[1]["messages"]
    assert (
        f"fusion token limit in force: limit 512, measured by bench on {socket.gethostname()} at TP 2 on 2026-12-03 "
        "against sglang's unfused path"
    ) in notes


def test_a_result_without_a_date_gives_none(package: Path) -> None:
    save_result(package, recorded(), drop=("date",))
    code, out = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "measured", "--tp", "2")
    assert code == 0, out
    assert out["token_limit"]["asked"]["date"] is None


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"{not json", "cannot read the saved bench result ("),
        (b'{"rows": []}', "is not a bench result this tool saved; run `sm120patch bench kernel` again"),
        (b"[1, 2]", "is not a bench result this tool saved; run `sm120patch bench kernel` again"),
    ],
    ids=["not-json", "no-saved-facts", "not-an-object"],
)
def test_a_saved_file_that_is_no_result_says_which_and_to_bench_again(package: Path, content: bytes, says: str) -> None:
    where = saved.path(from_directory(package))
    where.parent.mkdir(parents=True)
    where.write_bytes(content)
    code, _, err = measured(package)
    assert code == 2
    text = said(err)
    assert (
        text.startswith(f"error: [no-measurement] {where}")
        and says in text
        and text.endswith("run `sm120patch bench kernel` again")
    )


def test_one_token_is_the_smallest_limit_and_given_is_its_source(package: Path) -> None:
    code, out = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "1")
    assert code == 0, out
    assert limit_line(package) == "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 1"
    assert (out["token_limit"]["asked"]["limit"], out["token_limit"]["asked"]["source"]) == (1, "given")


def test_a_limit_above_sglangs_says_why_it_only_goes_down(package: Path) -> None:
    code, _, err = run("apply", "--sglang-path", str(package), "--fuse-up-to", "2049")
    assert code == 2
    assert said(err).endswith(
        "error: [usage] --fuse-up-to 2049 is above sglang 0.5.11's own limit of 2048 tokens: sglang sizes FlashInfer's "
        "workspace for 2048 tokens (max_token_num), so a larger batch would overrun it or stop at sglang's "
        "assert; the limit only goes down"
    )


def test_nvidia_smi_is_asked_with_a_bounded_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hung nvidia-smi must not hold ``apply --fuse-up-to measured`` forever."""
    waits: list[float | None] = []

    def fake_nvidia_smi(timeout: float | None) -> GpuReport:  # the fake nvidia-smi: two H200s
        waits.append(timeout)
        return GpuReport((Gpu(0, H200, (9, 0)), Gpu(1, H200, (9, 0))), "nvidia-smi")

    monkeypatch.setattr(gpus, "from_nvidia_smi", fake_nvidia_smi)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert fuse_limit._gpus() == [H200, H200]
    assert len(waits) == 1 and waits[0] is not None and 0 < waits[0] <= 60


def test_gpus_cuda_cannot_be_told_apart_are_not_compared(monkeypatch: pytest.MonkeyPatch) -> None:
    """``CUDA_VISIBLE_DEVICES`` naming MIG instances: which GPUs CUDA shows is not known here,
    so there is no GPU set to compare (``measured`` then needs --tp)."""
    two = GpuReport((Gpu(0, H200, (9, 0)), Gpu(1, H200, (9, 0))), "nvidia-smi")
    monkeypatch.setattr(gpus, "from_nvidia_smi", lambda timeout: two)  # the fake nvidia-smi: two H200s
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4a5b6c7d-0000-1111-2222-333344445555")
    assert fuse_limit._gpus() is None
