"""workspace-preflight beyond the contract every patch meets (tests/patcher/patches/test_contract.py):
where its findings are, the evidence it shows, and sglang's own size helper run before and
after it on every release that has it.

Each release 0.5.11 - 0.5.23 is installed, patched with every patch, and its
``_flashinfer_trtllm_workspace_allocation_sizes`` (before and after) is executed against
``FakeCudaDriver`` (``cuda.bindings.driver``; without multicast ``cuMulticastGetGranularity``
answers CUDA_ERROR_NOT_SUPPORTED) on a GPU that ``FakeTorch`` reports as cc 12.0, 12.1,
9.0 or 10.0, through the release's own SM probes (tests/support/sglang_exec.py).  The same
cycle checks with ``ast`` what changed and that revert restores every file byte for byte.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from packaging.version import Version

from sm120patch.patcher.kit.model import Finding, State
from sm120patch.patcher.plan.evidence import generate
from sm120patch.patcher.plan.registry import by_id
from sm120patch.sglang.layout import COMM_FUSION
from sm120patch.sglang.releases import ALL_RELEASES
from tests.support.realtrees import run_cycle
from tests.support.sglang_exec import FakeCudaDriver, MiB, workspace_sizes

PATCH = by_id()["workspace-preflight"]


# --- sglang's own size helper, before and after -------------------------------------------

WITH_PREFLIGHT = [v for v in ALL_RELEASES if Version(v) >= Version("0.5.11")]  # the preflight arrives in 0.5.11
# What FlashInfer's SymmDeviceMemory allocates without multicast for world 2, 2048 tokens,
# hidden 7168, bf16: round_up(buffer + 2048, 2 MiB) per buffer (flashinfer/comm/mnnvl.py,
# SymmDeviceMemory._get_allocation_prop), sizes cuMemCreate allocated on a real H200.
FLASHINFER_SIZES = [60817408, 4194304, 178257920]


def _raises_multicast(package: Path, source: bytes, capability: tuple[int, int]) -> list[str]:
    driver = FakeCudaDriver(multicast=False)
    with pytest.raises(RuntimeError, match="cuMulticastGetGranularity failed"):
        workspace_sizes(package, source, capability, driver)
    return driver.calls


@pytest.mark.slow  # real sglang releases from the package index
@pytest.mark.parametrize("version", WITH_PREFLIGHT)
def test_patched_size_helper_skips_multicast_on_sm12x_only(release, version: str) -> None:
    package = release(version)

    def behaves(originals: dict[str, bytes]) -> None:
        before, after = originals[COMM_FUSION], (package / COMM_FUSION).read_bytes()
        # Unpatched, an SM12x GPU without multicast fails the size probe: fusion goes off.
        _raises_multicast(package, before, (12, 0))
        # Patched, SM12x gets FlashInfer's sizes and never asks for multicast.
        for capability in ((12, 0), (12, 1)):
            driver = FakeCudaDriver(multicast=False)
            assert workspace_sizes(package, after, capability, driver) == FLASHINFER_SIZES
            assert "cuMulticastGetGranularity" not in driver.calls
        # SM90 / SM100 without multicast: the same calls and the same raise as before.
        for capability in ((9, 0), (10, 0)):
            assert _raises_multicast(package, after, capability) == _raises_multicast(package, before, capability)
        # SM90 with multicast: rounded to the multicast granularity exactly as before.
        old, new = (
            FakeCudaDriver(multicast=True, mc_granularity=64 * MiB),
            FakeCudaDriver(multicast=True, mc_granularity=64 * MiB),
        )
        sizes = workspace_sizes(package, after, (9, 0), new)
        assert sizes == workspace_sizes(package, before, (9, 0), old) == [64 * MiB, 64 * MiB, 192 * MiB]
        assert new.calls == old.calls

    result = run_cycle(package, after_apply=behaves)
    assert result["exit_code"] == 0
    assert result["states"]["workspace-preflight"] == "pending"
    changes = sorted(result["changes"][COMM_FUSION])
    if Version(version) < Version("0.5.14"):  # no SM probe in the file yet: the guard brings its import
        assert changes == ["guard", "import"]
    else:  # plus the resolver's widened guard (and its import until 0.5.19)
        assert "guard" in changes and changes.count("guard") == 1


@pytest.mark.slow  # real sglang releases from the package index
def test_release_without_the_preflight_is_left_alone(release) -> None:
    package = release("0.5.10")
    result = run_cycle(package)
    assert result["states"]["workspace-preflight"] == "not-needed"
    assert COMM_FUSION not in result["written"]


def _finding_of(name: str) -> Finding:
    (example,) = [e for e in PATCH.examples if e.name == name]
    return PATCH.check(cst.parse_module(example.before), example.context())


@pytest.mark.parametrize(
    "name",
    [
        "the query removed, as sglang#32330 proposed",
        "the size helper defined twice",
        "two multicast queries",
        "a Blackwell guard already skips the query on SM12x",
        "no sglang.srt.utils import to add the helper to",
        "a `continue` among the multicast statements",
        "the multicast granularity logged after the loop",
        "an unrelated statement among the multicast statements",
        "already guarded",
        "the rounded size kept in a name of its own",
        "no SM term in the file: the helper is imported (0.5.11 - 0.5.13)",
    ],
)
def test_findings_inside_the_size_helper_name_it(name: str) -> None:
    assert _finding_of(name).where == "_flashinfer_trtllm_workspace_allocation_sizes"


def test_a_guard_without_import_says_nothing_about_importing() -> None:
    finding = _finding_of("a cached SM120 flag in the file spells the guard")
    assert finding.detail == (
        "will put the 3 multicast statements of _flashinfer_trtllm_workspace_allocation_sizes under"
        " `if not _is_sm120_supported:`"
    )


def test_the_pending_finding_shows_the_multicast_query_it_guards() -> None:
    """Before the edit, the evidence is the query's line (14 of the first example), which is
    what ``apply --dry-run`` shows next to the change."""
    example = PATCH.examples[0]
    module = cst.parse_module(example.before)
    finding = PATCH.check(module, example.context())
    assert finding.state is State.PENDING
    _, (lines,) = generate(module, [finding.evidence])
    assert [(e.line, e.text.strip()) for e in lines] == [
        (14, "err, mc_granularity = cuda_driver.cuMulticastGetGranularity(mc_prop, 0)")
    ]
