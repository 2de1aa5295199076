"""``apply --fuse-up-to N|measured|sglang`` on the miniature release with sglang's token limit: the
limit written, verify naming it and its source, a re-apply with another N, a plain apply that
leaves it, revert byte for byte (the saved bench result goes with the state), and the
refusals: a higher N, a release without the limit, a result of another host, TP, GPU set,
release or install."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from sm120patch.bench.fuse_limit import server_limits
from sm120patch.bench.kernel import saved
from sm120patch.doctor.token_limit import token_limit as doctor_token_limit
from sm120patch.errors import EnvironmentProblem
from sm120patch.patcher.exports import patch_states
from sm120patch.patcher.plan.token_limit import mismatch
from sm120patch.sglang.tree import from_directory
from tests.support.cli import jrun, run
from tests.support.mini_sglang import COMM, FILES, write_mini_sglang
from tests.support.realtrees import sha256

LIMITED = (
    FILES[COMM]
    .replace(
        "def apply_flashinfer_allreduce_fusion(batch_size: int):\n",
        "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048\n\n\ndef apply_flashinfer_allreduce_fusion(batch_size: int):\n",
    )
    .replace(
        "        and batch_size > 0\n",
        "        and batch_size > 0\n        and batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE\n",
    )
)
BENCH = Path(__file__).parents[2] / "docs" / "bench" / "tp2-h200.json"


@pytest.fixture
def package(tmp_path: Path) -> Path:
    return write_mini_sglang(tmp_path / "site", files={**FILES, COMM: LIMITED})


def hashes(package: Path) -> dict[str, str]:
    return {str(p.relative_to(package)): sha256(p) for p in package.rglob("*.py")}


def limit_line(package: Path) -> str:
    return next(line for line in (package / COMM).read_text().splitlines() if line.startswith("FUSE_ALLREDUCE"))


def as_sglangs(data: dict) -> dict:
    """``data`` as if its unfused side had been sglang's own code costing what the allreduce alone
    did: fusion then wins up to 512 tokens, is even at 1024 and loses at 2048 (137 vs 124 µs)."""
    rows = [dict(r, unfused=r["allreduce"]) for r in data["rows"]]
    return dict(data, rows=rows, baseline={"source": "sglang", "indicative": False, "why": []})


def save_recorded(package: Path, stand_ins: bool = False, **changes: object) -> None:
    """The H200 run in docs/bench as this tree's last result, measured here (or as ``changes`` say),
    against sglang's own unfused path (``stand_ins``: as recorded, against plain torch)."""
    data = json.loads(BENCH.read_text())
    data = data if stand_ins else as_sglangs(data)
    tree = from_directory(package)
    facts = saved.identity(tree, data)
    facts.update(changes)
    saved.path(tree).parent.mkdir(parents=True, exist_ok=True)
    saved.path(tree).write_text(json.dumps(dict(data, saved=facts)))


def test_a_given_limit_is_written_named_by_verify_replanned_and_reverted_byte_for_byte(package: Path) -> None:
    before = hashes(package)
    code, out = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "512")
    assert code == 0, out
    assert limit_line(package) == "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 512"
    states = {r["id"]: r["state_after"] for r in out["patches"]}
    assert states["fusion-token-limit"] == "applied"
    code, out = jrun("verify", "--sglang-path", str(package))
    assert code == 0
    assert "fusion token limit in force: limit 512, given as --fuse-up-to 512" in out["messages"]
    code, out = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "1024")  # another N re-plans
    assert code == 0 and limit_line(package) == "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 1024"
    code, out = jrun("apply", "--sglang-path", str(package))  # without it: the limit stays
    assert code == 0 and limit_line(package) == "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 1024"
    assert (
        "fusion token limit in force: limit 1024, given as --fuse-up-to 1024"
        in jrun("verify", "--sglang-path", str(package))[1]["messages"]
    )
    code, out = jrun("revert", "--sglang-path", str(package))
    assert code == 0
    assert hashes(package) == before
    assert not (package / ".sm120patch").exists()


def test_a_plain_apply_leaves_sglangs_limit_and_verify_says_it(package: Path) -> None:
    assert jrun("apply", "--sglang-path", str(package))[0] == 0
    assert limit_line(package) == "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048"
    notes = jrun("verify", "--sglang-path", str(package))[1]["messages"]
    assert any(n.startswith("fusion token limit in force: 2048 (FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048)") for n in notes)


def test_a_verify_after_a_hand_edit_back_to_sglangs_limit_reads_pending(package: Path) -> None:
    assert jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "256")[0] == 0
    path = package / COMM
    path.write_text(path.read_text().replace("= 256", "= 2048"))
    code, out = jrun("verify", "--sglang-path", str(package))
    assert code == 1
    assert {r["id"]: r["state"] for r in out["patches"]}["fusion-token-limit"] == "pending"


def test_a_higher_limit_is_a_usage_error_that_says_why(package: Path) -> None:
    before = hashes(package)
    code, _, err = run("apply", "--sglang-path", str(package), "--fuse-up-to", "4096")
    assert code == 2
    assert "above sglang 0.5.11's own limit of 2048 tokens" in " ".join(err.split())
    assert "max_token_num" in err
    assert hashes(package) == before and not (package / ".sm120patch" / "manifest.json").exists()


def test_after_lowering_a_limit_up_to_sglangs_own_is_still_allowed(package: Path) -> None:
    assert jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "128")[0] == 0
    assert jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "2048")[0] == 0  # read from the backup
    assert limit_line(package) == "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048"
    assert run("apply", "--sglang-path", str(package), "--fuse-up-to", "2049")[0] == 2


@pytest.mark.parametrize("spelled", ["sglang", "SGLang"])
def test_sglang_puts_the_releases_limit_back_without_a_revert(package: Path, spelled: str) -> None:
    """After ``--fuse-up-to 512``, ``--fuse-up-to sglang`` writes sglang's own limit back and
    leaves every other patch in place; verify and doctor name the limit as sglang's, and a
    plain apply keeps it."""
    assert jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "512")[0] == 0
    code, out = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", spelled)
    assert code == 0, out
    assert limit_line(package) == "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048"
    assert out["written"] == [f"sglang/{COMM}"] and (package / ".sm120patch" / "manifest.json").exists()
    code, out = jrun("verify", "--sglang-path", str(package))
    assert code == 0 and "fusion token limit in force: limit 2048, sglang's own" in out["messages"]
    assert out["token_limit"]["in_force"] == out["token_limit"]["sglang"] == 2048
    assert out["token_limit"]["asked"]["source"] == "sglang"
    tree = from_directory(package)  # doctor: as where no limit was ever asked
    said = doctor_token_limit(tree, patch_states(tree), (), None)
    assert [f.summary for f in said] == ["fusion token limit: sglang's own, 2048 tokens (not measured here)"]
    assert jrun("apply", "--sglang-path", str(package))[0] == 0
    assert limit_line(package) == "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048"


def test_bench_server_takes_no_sglang_setting(package: Path) -> None:
    """Its third setting at sglang's own limit would be its fusion-on setting again."""
    with pytest.raises(EnvironmentProblem, match="is the fusion-on setting itself"):
        server_limits(from_directory(package), "sglang", None)


def test_sglang_on_a_release_without_a_limit_is_an_error(tmp_path: Path) -> None:
    package = write_mini_sglang(tmp_path / "site")
    code, _, err = run("apply", "--sglang-path", str(package), "--fuse-up-to", "sglang")
    assert code == 2 and "--fuse-up-to sglang: sglang 0.5.11 has no fusion token limit of its own" in err


@pytest.mark.parametrize("value", ["0", "-3", "lots", "1.5"])
def test_a_value_that_is_no_token_count_is_a_usage_error(package: Path, value: str) -> None:
    code, _, err = run("apply", "--sglang-path", str(package), "--fuse-up-to", value)
    assert code == 2 and "neither a token count" in err


def test_a_release_without_the_limit_refuses_and_writes_nothing(tmp_path: Path) -> None:
    package = write_mini_sglang(tmp_path / "site")
    before = hashes(package)
    code, out = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "512")
    assert code == 1
    assert "has no fusion token limit to lower" in out["headline"]
    assert hashes(package) == before


def test_measured_takes_the_crossover_of_the_saved_result(package: Path) -> None:
    save_recorded(package)
    code, out = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "measured", "--tp", "2")
    assert code == 0, out
    assert limit_line(package) == "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 512"
    notes = jrun("verify", "--sglang-path", str(package))[1]["messages"]
    host = socket.gethostname()
    assert any(
        n.startswith(f"fusion token limit in force: limit 512, measured by bench on {host} at TP 2 on ")
        and n.endswith(" against sglang's unfused path")
        for n in notes
    )
    code, _ = jrun("revert", "--sglang-path", str(package))
    assert code == 0 and not (package / ".sm120patch").exists()  # the result went with the state


@pytest.mark.parametrize(
    ("changes", "tp", "said"),
    [
        ({"host": "another-host"}, None, "was measured on another-host, not on this host"),
        ({}, 4, "was measured at TP 2, not TP 4"),
        ({"release": "0.5.9"}, None, "was measured with sglang 0.5.9, not 0.5.11"),
        ({"gate_record_sha256": "0" * 64}, None, "is older than the installed sglang files"),
        ({"epoch": 1.0}, None, "is older than the installed sglang files"),
    ],
)
def test_measured_refuses_a_result_of_elsewhere_in_one_sentence(
    package: Path, changes: dict, tp: int | None, said: str
) -> None:
    save_recorded(package, **changes)
    before = hashes(package)
    args = ["apply", "--sglang-path", str(package), "--fuse-up-to", "measured", *(["--tp", str(tp)] if tp else [])]
    code, _, err = run(*args)
    assert code == 2
    assert said in " ".join(err.split())
    assert hashes(package) == before


def test_measured_refuses_another_gpu_set() -> None:
    facts = {"host": socket.gethostname(), "release": "0.5.11", "tp": 2, "gpus": ["NVIDIA H200", "NVIDIA H200"]}

    class Tree:
        version = "0.5.11"
        dist_info = None
        flashinfer = None  # none beside it: not compared
        record = type("R", (), {"sha256": staticmethod(lambda rel: None)})()

        @staticmethod
        def same_release(version: str | None) -> bool:
            return version == "0.5.11"

        @staticmethod
        def exists(rel: str) -> bool:
            return False

    said = mismatch(Tree(), facts, 2, gpus=["NVIDIA RTX PRO 6000 Blackwell", "NVIDIA H200"])  # type: ignore[arg-type]
    assert (
        said == "was measured on NVIDIA H200, NVIDIA H200, not on this host's GPUs "
        "(NVIDIA RTX PRO 6000 Blackwell, NVIDIA H200)"
    )
    assert mismatch(Tree(), facts, 2, gpus=["NVIDIA H200"] * 4) is None  # type: ignore[arg-type]


def test_measured_refuses_a_result_against_stand_ins_but_a_number_is_taken(package: Path) -> None:
    """The recorded run's unfused side was plain torch: its crossover is not sglang's, so
    ``measured`` says so and what to do; the user may still give the limit as a number."""
    save_recorded(package, stand_ins=True)
    before = hashes(package)
    code, _, err = run("apply", "--sglang-path", str(package), "--fuse-up-to", "measured", "--tp", "2")
    said = " ".join(err.split())
    assert code == 2 and "the saved bench result is indicative only" in said
    assert "run `sm120patch bench kernel` where sglang imports" in said and "--fuse-up-to N" in said
    assert hashes(package) == before
    assert jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "512")[0] == 0


@pytest.mark.parametrize(("visible", "said"), [(None, "nvidia-smi did not answer"), (4, "this host shows 4 GPUs")])
def test_measured_without_tp_refuses_unless_the_gpus_cuda_shows_are_the_results_tp(
    package: Path, monkeypatch: pytest.MonkeyPatch, visible: int | None, said: str
) -> None:
    """A TP-2 result is not applied silently for a server whose TP was never said: without
    --tp it is taken only where CUDA shows this host's 2 GPUs."""
    from sm120patch.bench import fuse_limit

    save_recorded(package)
    before = hashes(package)
    monkeypatch.setattr(fuse_limit, "_gpus", lambda: None if visible is None else ["NVIDIA H200"] * visible)
    code, _, err = run("apply", "--sglang-path", str(package), "--fuse-up-to", "measured")
    assert code == 2 and hashes(package) == before
    assert " ".join(err.split()).endswith(
        f"--fuse-up-to measured: the saved bench result was measured at TP 2 and {said}, so the TP sglang serves "
        "at cannot be told; add --tp with it (--tp 2 if that is it)"
    )
    monkeypatch.setattr(fuse_limit, "_gpus", lambda: ["NVIDIA H200"] * 2)
    assert jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "measured")[0] == 0
    assert limit_line(package) == "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 512"


def test_measured_without_a_saved_result_says_to_bench_first(package: Path) -> None:
    code, _, err = run("apply", "--sglang-path", str(package), "--fuse-up-to", "measured")
    assert code == 2 and "run `sm120patch bench kernel` first" in err


def test_tp_without_measured_is_a_usage_error(package: Path) -> None:
    assert run("apply", "--sglang-path", str(package), "--tp", "2")[0] == 2
    assert run("apply", "--sglang-path", str(package), "--fuse-up-to", "512", "--tp", "2")[0] == 2


def test_a_bench_result_alone_is_removed_by_revert_and_said(package: Path) -> None:
    save_recorded(package)
    code, out = jrun("revert", "--sglang-path", str(package))
    assert code == 0 and not (package / ".sm120patch").exists(), out
    assert out["headline"] == "nothing to revert: no saved state, files as released"
    assert (
        "removed the saved bench result (bench-last.json): run `sm120patch bench kernel` to measure again"
        in out["messages"]
    )


def test_bench_json_then_apply_measured_writes_the_crossover_and_revert_undoes_it(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench's measurement is the two-H200 result of tests/bench/kernel/test_render.py against sglang's
    own unfused path (``measure.run`` replaced): fusion wins at 1 and 128 tokens, not at 2048."""
    from sm120patch.bench.kernel import command
    from tests.bench.kernel.test_render import SGLANG, crossing

    monkeypatch.setattr(
        command, "run", lambda settings, call, hatch, on_event, version, model: crossing(SGLANG, model=model)
    )
    before = hashes(package)
    code, out, _ = run("bench", "--sglang-path", str(package), "--tp", "2", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["crossover"]["reach"] == "up-to" and data["crossover"]["limit"] == 128
    assert data["crossover"]["next_tokens"] == 2048 and data["kept"] == str(saved.path(from_directory(package)))
    kept = json.loads(saved.path(from_directory(package)).read_text())["saved"]
    assert (kept["host"], kept["tp"], kept["gpus"], kept["dtype"], kept["hidden"], kept["release"]) == (
        socket.gethostname(), 2, ["NVIDIA H200", "NVIDIA H200"], "bf16", 7168, "0.5.11",
    )  # fmt: skip
    code, applied = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "measured", "--tp", "2")
    assert code == 0, applied
    assert limit_line(package) == "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 128"
    notes = jrun("verify", "--sglang-path", str(package))[1]["messages"]
    assert f"fusion token limit in force: limit 128, measured by bench on {socket.gethostname()} at TP 2 on " in (
        " ".join(notes)
    )
    assert jrun("revert", "--sglang-path", str(package))[0] == 0
    assert hashes(package) == before and not (package / ".sm120patch").exists()


def test_a_dry_run_shows_the_new_limit_and_writes_nothing(package: Path) -> None:
    before = hashes(package)
    code, out, _ = run("apply", "--sglang-path", str(package), "--fuse-up-to", "640", "--dry-run")
    assert code == 0
    assert "-FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048\n+FUSE_ALLREDUCE_MAX_BATCH_SIZE = 640\n" in out
    assert hashes(package) == before and not (package / ".sm120patch" / "manifest.json").exists()


def test_a_limit_with_the_limit_patch_left_out_is_a_usage_error(package: Path) -> None:
    code, _, err = run("apply", "--sglang-path", str(package), "--fuse-up-to", "640", "--skip", "fusion-token-limit")
    assert code == 2 and "--fuse-up-to needs the fusion-token-limit patch" in err
    code, data = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "640", "--skip", "fusion-token-limit")
    assert (code, data["code"]) == (2, "usage")
    code, _ = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "640", "--only", "fusion-token-limit")
    assert code == 0 and limit_line(package) == "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 640"


def test_a_manifest_with_a_limit_says_so_to_an_older_sm120patch(package: Path) -> None:
    """Format 3 where a limit is recorded: a tool of format 2 says "upgrade", not "corrupted"."""
    assert jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "640")[0] == 0
    manifest = json.loads((package / ".sm120patch" / "manifest.json").read_text())
    assert (manifest["format"], manifest["token_limit"]["limit"]) == (3, 640)
    assert jrun("revert", "--sglang-path", str(package))[0] == 0
    assert jrun("apply", "--sglang-path", str(package))[0] == 0
    manifest = json.loads((package / ".sm120patch" / "manifest.json").read_text())
    assert manifest["format"] == 2 and "token_limit" not in manifest


def test_the_gpus_compared_are_those_cuda_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    """nvidia-smi lists four GPUs; ``CUDA_VISIBLE_DEVICES=0,1`` shows two: the TP a result is
    taken for without --tp is that count; nvidia-smi silent: not known (None)."""
    from sm120patch.bench import fuse_limit
    from sm120patch.runner import gpus
    from sm120patch.runner.gpus import Gpu, GpuReport

    four = GpuReport(tuple(Gpu(i, f"NVIDIA H200 #{i}", (9, 0)) for i in range(4)), "nvidia-smi")
    monkeypatch.setattr(gpus, "from_nvidia_smi", lambda timeout: four)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert fuse_limit._gpus() == ["NVIDIA H200 #2", "NVIDIA H200 #3"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert fuse_limit._gpus() == [f"NVIDIA H200 #{i}" for i in range(4)]
    monkeypatch.setattr(gpus, "from_nvidia_smi", lambda timeout: GpuReport((), "nvidia-smi", "not found"))
    assert fuse_limit._gpus() is None


def test_verify_and_apply_json_give_the_limit_as_an_object(package: Path) -> None:
    """Not only a sentence in ``messages``: the value in force, sglang's own, and the ask with
    its source, for a script to read."""
    code, out = jrun("verify", "--sglang-path", str(package))
    assert out["token_limit"] == {"in_force": 2048, "sglang": 2048, "asked": None}
    save_recorded(package)
    code, out = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "measured", "--tp", "2")
    assert code == 0
    asked = out["token_limit"]["asked"]
    assert (out["token_limit"]["in_force"], out["token_limit"]["sglang"]) == (512, 2048)
    assert (asked["limit"], asked["source"], asked["tp"], asked["host"]) == (512, "measured", 2, socket.gethostname())
    assert (asked["baseline"], asked["indicative"]) == ("sglang's unfused path", False)
    assert jrun("verify", "--sglang-path", str(package))[1]["token_limit"] == out["token_limit"]
    assert (
        jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "256", "--dry-run")[1]["token_limit"]["in_force"]
        == 512
    )  # a dry run writes nothing: the limit in force is still 512


def test_a_release_without_the_limit_has_no_limit_object(tmp_path: Path) -> None:
    assert jrun("verify", "--sglang-path", str(write_mini_sglang(tmp_path / "site")))[1]["token_limit"] is None


def test_measured_refuses_a_result_of_another_flashinfer(package: Path) -> None:
    """The fused kernel is FlashInfer's: a result measured with another version of it is not
    this host's crossover (compared where a FlashInfer is found beside sglang)."""
    from dataclasses import replace

    tree = from_directory(package)
    facts = {"host": socket.gethostname(), "release": tree.version, "tp": 2, "flashinfer": "0.6.17"}
    assert mismatch(replace(tree, flashinfer="0.6.17"), facts, 2) is None
    said = mismatch(replace(tree, flashinfer="0.6.18"), facts, 2)
    assert said == "was measured with FlashInfer 0.6.17, not 0.6.18 (installed beside sglang now)"
    assert mismatch(replace(tree, flashinfer=None), facts, 2) is None


def test_a_plain_apply_after_a_reinstall_says_it_writes_the_recorded_limit_again(package: Path) -> None:
    code, first = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "512")
    assert code == 0
    (package / COMM).write_text(LIMITED)  # a reinstall of the same release: sglang's 2048 back
    code, out = jrun("apply", "--sglang-path", str(package))
    assert code == 0 and limit_line(package) == "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 512"
    again = (
        "fusion token limit written again as the last apply was asked (limit 512, given as --fuse-up-to 512); "
        "`sm120patch apply --fuse-up-to sglang` puts sglang's own back"
    )
    assert again in out["messages"]
    # added to the others (the GPU's), not in place of them
    assert set(first["messages"]) | {again} == set(out["messages"])
    code, out = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "256")  # asked: nothing to say
    assert code == 0 and not any("written again" in m for m in out["messages"])


def test_a_refused_apply_shows_the_limit_it_would_have_written(package: Path) -> None:
    """--strict refuses (FlashInfer is missing: a warning), nothing is written, and the report
    says what the limit patch would have done with the limit asked, not sglang's own."""
    before = hashes(package)
    code, out = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "512", "--strict")
    assert (code, out["code"], out["written"]) == (1, "strict", [])
    report = {r["id"]: r for r in out["patches"]}["fusion-token-limit"]
    assert (report["state"], report["detail"]) == (
        "pending",
        "will set the fusion token limit to 512 (now FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048)",
    )
    assert hashes(package) == before
