"""One real release per era (sglang-versions.md E8-E17) and one of each refusal kind."""

from __future__ import annotations

import pytest

from tests.realtrees import run_cycle

P, N = "pending", "not-needed"
PATCH_IDS = (
    "communicator-import",
    "communicator-flag",
    "communicator-fusion-gate",
    "server-args-auto-enable",
    "fusion-backend-resolver",
    "workspace-preflight",
)

pytestmark = pytest.mark.slow  # real sglang releases from the package index
GATE = "srt/layers/communicator.py"
ADD_NORM = "srt/layers/layer_boundary/residual/add_norm.py"

# release: (states in PATCH_IDS order, {file: intended ast changes})
ERAS = {
    # E8: method gate, GPT-OSS `if is_sm100_supported():` widened, DeepSeek block left alone
    "0.5.4": ((P, P, P, P, N, N), {GATE: ["flag", "import", "or-term"], "srt/server_args.py": ["or-term"]}),
    # E9: GPT-OSS already `is_blackwell_supported()`
    "0.5.5": ((P, P, P, N, N, N), {GATE: ["flag", "import", "or-term"]}),
    # E10: `_is_cuda and ...` flags
    "0.5.6.post2": ((P, P, P, N, N, N), {GATE: ["flag", "import", "or-term"]}),
    # E11: unified auto-enable already admits SM12x
    "0.5.7": ((P, P, P, N, N, N), {GATE: ["flag", "import", "or-term"]}),
    # E12: the hand fix's era (all of it in test_cycle_real_releases.py)
    "0.5.12.post1": (
        (P, P, P, P, N, P),
        {GATE: ["flag", "import", "or-term"], "srt/server_args.py": ["or-term"],
         "srt/layers/flashinfer_comm_fusion.py": ["guard", "import"]},
    ),
    # E13: backend field, resolver appears
    "0.5.14": (
        (P, P, P, P, P, P),
        {GATE: ["flag", "import", "or-term"], "srt/server_args.py": ["or-term"],
         "srt/layers/flashinfer_comm_fusion.py": ["guard", "import", "or-term"]},
    ),
    # E14: auto-enable in arg_groups/overrides.py
    "0.5.18": (
        (P, P, P, P, P, P),
        {GATE: ["flag", "import", "or-term"], "srt/arg_groups/overrides.py": ["or-term"],
         "srt/layers/flashinfer_comm_fusion.py": ["guard", "import", "or-term"]},
    ),
    # E15: get_platform() flags, nothing to import
    "0.5.20": (
        (N, P, P, P, P, P),
        {GATE: ["flag", "or-term"], "srt/arg_groups/overrides.py": ["or-term"],
         "srt/layers/flashinfer_comm_fusion.py": ["guard", "or-term"]},
    ),
    # E16: gate moved to add_norm.py
    "0.5.21": (
        (N, P, P, P, P, P),
        {ADD_NORM: ["flag", "or-term"], "srt/arg_groups/overrides.py": ["or-term"],
         "srt/layers/flashinfer_comm_fusion.py": ["guard", "or-term"]},
    ),
    # E17: gate renamed flashinfer_ar_fusion_applies
    "0.5.23": (
        (N, P, P, P, P, P),
        {ADD_NORM: ["flag", "or-term"], "srt/arg_groups/overrides.py": ["or-term"],
         "srt/layers/flashinfer_comm_fusion.py": ["guard", "or-term"]},
    ),
}

REFUSED = {
    "0.4.8.post1": "has no FlashInfer allreduce fusion",  # E0
    "0.5.3.post1": "has no SM12x probe",  # E6: fusion, but no is_sm120_supported
}


@pytest.mark.parametrize("version", list(ERAS))
def test_era_full_cycle(release, version: str) -> None:
    states, changes = ERAS[version]
    result = run_cycle(release(version))
    assert result["exit_code"] == 0
    assert tuple(result["states"][pid] for pid in PATCH_IDS) == states
    assert {rel: sorted(c) for rel, c in result["changes"].items()} == changes


@pytest.mark.parametrize("version", list(REFUSED))
def test_refused_release(release, version: str) -> None:
    result = run_cycle(release(version))
    assert result["exit_code"] == 1
    assert REFUSED[version] in result["refusal"]
    assert "0.5.4" in result["refusal"]  # names the first supported release
