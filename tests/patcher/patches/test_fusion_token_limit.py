"""fusion-token-limit beyond the contract every patch meets (tests/patcher/patches/test_contract.py):
the readers without libcst agree with it, and sglang's own gate run with the lowered limit (a
batch above it is no longer fused, one at or below it still is)."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sm120patch.patcher.commands.apply import apply as apply_tree
from sm120patch.patcher.commands.revert import revert as revert_tree
from sm120patch.patcher.commands.verify import verify as verify_tree
from sm120patch.patcher.kit.model import Example, State
from sm120patch.patcher.patches.fusion_token_limit import BATCH, LIMIT_NAME, LITERAL_GATES, limit_in_force, limit_sites
from sm120patch.patcher.plan import token_limit
from sm120patch.patcher.plan.registry import by_id
from sm120patch.patcher.plan.token_limit import LIMIT_SITE, LimitAsk, limit_in, sglang_limit
from sm120patch.sglang.layout import ADD_NORM, COMMUNICATOR
from sm120patch.sglang.tree import from_directory
from tests.support.realtrees import copy_release, intended_changes, sha256
from tests.support.sglang_exec import load_function

PATCH = by_id()["fusion-token-limit"]


@pytest.mark.parametrize("example", [pytest.param(e, id=e.name) for e in PATCH.examples])
def test_the_readers_without_libcst_find_the_limit_the_patch_finds(example: Example) -> None:
    """doctor and verify --json read the limit with ``ast`` (no libcst on a trusted tree): the
    same value as the patch's own sites, before and after, in every example."""
    import libcst as cst

    for code in {example.before, example.after or example.before}:
        found = limit_sites(cst.parse_module(code))
        by_cst = limit_in_force(found[0]) if not isinstance(found, str) and found[0] else None
        assert limit_in(code.encode()) == by_cst


def test_the_reader_without_libcst_looks_where_the_patch_looks() -> None:
    assert token_limit.BATCH == BATCH
    assert {(a.cls, a.name) for a in LITERAL_GATES} == {token_limit.LITERAL_GATE}


def test_its_doc_names_how_sglang_sizes_the_workspace() -> None:
    assert "max_token_num" in PATCH.doc  # how sglang sizes the workspace a larger limit would overrun


def test_plan_names_the_reports_site_as_the_patch_does() -> None:
    """verify reads "the release has the limit" from the report's ``where``, without libcst."""
    assert LIMIT_SITE == LIMIT_NAME


def test_is_opt_in_and_requires_nothing() -> None:
    assert PATCH.requires == () and PATCH.provides == ()
    assert all(a.expect.value == "not-needed" for a in PATCH.anchors)


# --- real releases (slow tier) -----------------------------------------------------------------

#: One release of each era with the limit: the method gate and its literal (0.5.4 - 0.5.7), the
#: module function (0.5.8 - 0.5.20, three spellings of the flag term; 0.5.10 with
#: `attn_cp_size <= 1`), add_norm.py (0.5.21), renamed (0.5.22+).
LIMIT_ERAS = ["0.5.4", "0.5.7", "0.5.9", "0.5.10", "0.5.14", "0.5.17", "0.5.21", "0.5.23"]
GATES = {
    "0.5.9": (COMMUNICATOR, "apply_flashinfer_allreduce_fusion"),
    "0.5.10": (COMMUNICATOR, "apply_flashinfer_allreduce_fusion"),  # also `attn_cp_size <= 1`: not the limit
    "0.5.14": (COMMUNICATOR, "apply_flashinfer_allreduce_fusion"),
    "0.5.17": (COMMUNICATOR, "apply_flashinfer_allreduce_fusion"),
    "0.5.21": (ADD_NORM, "apply_flashinfer_allreduce_fusion"),
    "0.5.23": (ADD_NORM, "flashinfer_ar_fusion_applies"),
}


def sm120_host_with_fusion_on() -> dict[str, Any]:
    """What sglang's gate reads besides the batch, on an SM120 host with fusion asked for: named fakes."""
    server_args = SimpleNamespace(
        enable_flashinfer_allreduce_fusion=True,
        flashinfer_allreduce_fusion_backend="trtllm",
        comm=SimpleNamespace(flashinfer_allreduce_fusion_backend="trtllm"),
        attn_cp_size=1,  # no context parallelism (0.5.10's gate)
    )
    return {
        "_is_sm90_supported": False,  # the GPU's capability: 12.0
        "_is_sm100_supported": False,
        "_is_sm120_supported": True,
        "_is_flashinfer_available": True,
        "is_dp_attention_enabled": lambda: False,
        "get_global_server_args": lambda: server_args,
        "get_exec": lambda: server_args,
        "uses_cutedsl_ar_fusion": lambda: False,
        "is_flashinfer_allreduce_unavailable": lambda: False,
    }


def limits_in(source: bytes) -> list[int]:
    """Every value of the token limit in ``source``, read with ast (not by the patch's code)."""
    values = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [LIMIT_NAME]:
            values.append(node.value.value)  # type: ignore[attr-defined]
        if (
            isinstance(node, ast.Compare)
            and isinstance(node.ops[-1], ast.LtE)
            and isinstance(node.comparators[-1], ast.Constant)
            and "shape" in ast.unparse(node.left)
        ):
            values.append(node.comparators[-1].value)
    return values


@pytest.mark.slow  # real sglang releases from the package index
@pytest.mark.parametrize("version", LIMIT_ERAS)
def test_a_real_release_lowered_verified_replanned_and_reverted_byte_for_byte(version: str, tmp_path: Path) -> None:
    package = copy_release(version, tmp_path / "site")
    tree = from_directory(package)
    rel = PATCH.target(tree.exists)
    original = (package / rel).read_bytes()
    assert min(limits_in(original)) == 2048  # sglang's own, in every era
    assert sglang_limit(tree) == sglang_limit(tree, shipped=False) == 2048
    before = {p: sha256(p) for p in package.rglob("*.py")}
    first = apply_tree(tree, token_limit=LimitAsk(512))
    assert first.exit_code == 0, first.headline
    assert (sglang_limit(tree), sglang_limit(tree, shipped=False)) == (2048, 512)  # doctor's and --json's reader
    assert set(limits_in((package / rel).read_bytes())) == {512}
    assert intended_changes(original, (package / rel).read_bytes()).count("limit") == len(limits_in(original))
    checked = verify_tree(tree)
    assert checked.exit_code == 0
    assert "fusion token limit in force: limit 512, given as --fuse-up-to 512" in checked.notes
    assert {r.id: r.state for r in checked.plan.reports}[PATCH.id] is State.APPLIED  # type: ignore[union-attr]
    again = apply_tree(tree, token_limit=LimitAsk(64))  # another N re-plans from the patched file
    assert again.exit_code == 0 and again.written == [rel]
    assert set(limits_in((package / rel).read_bytes())) == {64}
    plain = apply_tree(tree)  # without --fuse-up-to: the limit stays, nothing is written
    assert plain.exit_code == 0 and plain.written == [] and set(limits_in((package / rel).read_bytes())) == {64}
    back = revert_tree(tree)
    assert back.exit_code == 0, back.headline
    assert {p: sha256(p) for p in package.rglob("*.py")} == before
    assert not (package / ".sm120patch").exists()


@pytest.mark.slow  # real sglang releases from the package index
@pytest.mark.parametrize("version", sorted(GATES))
def test_sglangs_own_gate_no_longer_fuses_above_the_lowered_limit(version: str, tmp_path: Path) -> None:
    package = copy_release(version, tmp_path / "site")
    tree = from_directory(package)
    assert apply_tree(tree, token_limit=LimitAsk(512)).exit_code == 0
    rel, name = GATES[version]
    gate = release_gate(package / rel, name)
    assert [bool(gate(n)) for n in (1, 511, 512, 513, 2048)] == [True, True, True, False, False]
    assert revert_tree(tree).exit_code == 0
    # The pristine gate knows no SM120: run it as on an H200.
    gate = release_gate(package / rel, name, _is_sm90_supported=True)
    assert [bool(gate(n)) for n in (512, 513, 2048, 2049)] == [True, True, True, False]


def release_gate(path: Path, name: str, **host: Any) -> Any:
    """The gate ``name`` of ``path`` as sglang has it, with the module's own limit constant,
    on the host ``sm120_host_with_fusion_on`` describes (``host``: what differs)."""
    source = path.read_bytes()
    namespace = {**sm120_host_with_fusion_on(), **host}
    limit = [
        s
        for s in ast.parse(source).body
        if isinstance(s, ast.Assign) and [getattr(t, "id", None) for t in s.targets] == [LIMIT_NAME]
    ]
    exec(compile(ast.Module(limit, type_ignores=[]), str(path), "exec"), namespace)
    return load_function(source, name, namespace, str(path))


@pytest.mark.slow  # a real release older than sglang's SM12x probe
def test_a_limit_asked_of_a_release_refused_as_a_whole_writes_nothing(tmp_path: Path) -> None:
    """0.5.3 has the limit, but no release before 0.5.4 is patched at all: the whole-release
    refusal comes first and says why, and a limit asked does not slip a write past it (a
    release without the limit: tests/cli/test_fuse_up_to.py)."""
    package = copy_release("0.5.3", tmp_path / "site")
    before = {p: sha256(p) for p in package.rglob("*.py")}
    outcome = apply_tree(from_directory(package), token_limit=LimitAsk(512))
    assert outcome.exit_code == 1
    assert outcome.headline.startswith("sglang 0.5.3 has no SM12x probe (sglang.srt.utils.is_sm120_supported")
    assert outcome.headline.endswith("Upgrade to sglang >= 0.5.4.")
    assert {p: sha256(p) for p in package.rglob("*.py")} == before


class FakeNorm:
    """What the method gate hands the batch to: the fused call, or the plain norm after the allreduce."""

    def forward_with_allreduce_fusion(self, hidden_states: Any, residual: Any) -> tuple[str, Any]:
        return "fused", residual

    def __call__(self, hidden_states: Any, residual: Any = None) -> tuple[str, Any]:
        return "unfused", residual


@pytest.mark.slow  # real sglang releases from the package index
@pytest.mark.parametrize("version", ["0.5.5.post2", "0.5.7"])
def test_sglangs_own_method_gate_no_longer_fuses_above_the_lowered_limit(version: str, tmp_path: Path) -> None:
    """0.5.4 - 0.5.7 compare the batch with a literal inside
    ``CommunicateWithAllReduceAndLayerNormFn._gather_hidden_states_and_residual``: that method,
    as the release has it after ``--fuse-up-to 512``, run on one TP rank of an SM120 host
    (named fakes for the attention-TP context and the norm)."""
    package = copy_release(version, tmp_path / "site")
    tree = from_directory(package)
    assert apply_tree(tree, token_limit=LimitAsk(512)).exit_code == 0
    source = (package / COMMUNICATOR).read_bytes()
    (cls,) = [
        s
        for s in ast.parse(source).body
        if isinstance(s, ast.ClassDef) and s.name == "CommunicateWithAllReduceAndLayerNormFn"
    ]
    (method,) = [
        s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "_gather_hidden_states_and_residual"
    ]
    method.decorator_list = []  # a staticmethod: run as a plain function
    namespace = {
        **sm120_host_with_fusion_on(),
        "torch": SimpleNamespace(Tensor=object, nn=SimpleNamespace(Module=object)),
        "ForwardBatch": object,
        "CommunicateContext": object,
        "ScatterMode": SimpleNamespace(SCATTERED="scattered"),
        "get_attn_tp_context": lambda: SimpleNamespace(input_scattered=False),
        "tensor_model_parallel_all_reduce": lambda hidden_states: hidden_states,
        "_is_npu": False,
    }
    exec(compile(ast.Module([method], type_ignores=[]), str(package / COMMUNICATOR), "exec"), namespace)
    gather = namespace["_gather_hidden_states_and_residual"]
    context = SimpleNamespace(attn_tp_size=2, attn_dp_size=1, attn_tp_rank=0, cache=None)

    def path(tokens: int) -> str:
        batch = SimpleNamespace(shape=(tokens, 7168))
        return gather(batch, "residual", None, FakeNorm(), context, residual_input_mode="tp-full")[0]

    assert [path(n) for n in (1, 512, 513, 2048)] == ["fused", "fused", "unfused", "unfused"]


def test_a_pending_limit_names_each_site_the_constant_with_its_value_the_gate_by_its_comparison() -> None:
    """0.5.4 - 0.5.7 write the limit twice: the constant and the gate method's own literal."""
    import libcst as cst

    from sm120patch.patcher.plan.registry import provided_for

    (example,) = [e for e in PATCH.examples if e.name.startswith("the constant and the gate method's literal")]
    finding = PATCH.check(cst.parse_module(example.before), example.context(provided_for(PATCH)))
    assert finding.detail == (
        "will set the fusion token limit to 256 (now FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048; "
        "CommunicateWithAllReduceAndLayerNormFn._gather_hidden_states_and_residual: hidden_states.shape[0] <= 4096)"
    )
