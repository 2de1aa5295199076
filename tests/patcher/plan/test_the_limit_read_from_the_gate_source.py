"""The fusion token limit doctor and ``verify --json`` read from the gate's module without libcst
(``token_limit.limit_in``): the constant wherever sglang sets it at import time, the 0.5.4 -
0.5.7 gate method's literal, and no limit where the module does not give one integer.  The
snippets are written here in sglang's style; each is also read by the patch itself, so the two
readers cannot drift apart on a shape the patch sees."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from sm120patch.patcher.patches.fusion_token_limit import limit_in_force, limit_sites
from sm120patch.patcher.plan.token_limit import limit_in

#: (what the module does, its source, the largest batch fused; None: no limit that can be read)
GATE_MODULES = [
    (
        "set before an import-time if",
        """
        FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048

        if _is_flashinfer_available:
            import flashinfer.comm as flashinfer_comm
        else:
            flashinfer_comm = None
        """,
        2048,
    ),
    (
        "set in an import-time if",
        """
        if _is_flashinfer_available:
            import flashinfer.comm as flashinfer_comm

            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 1024
        """,
        1024,
    ),
    (
        "set in the else of an import-time if",
        """
        if _is_hip:
            pass
        else:
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 768
        """,
        768,
    ),
    (
        "set before an import-time try",
        """
        FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048

        try:
            import flashinfer.comm as flashinfer_comm
        except ImportError:
            flashinfer_comm = None
        else:
            _is_flashinfer_available = True
        finally:
            pass
        """,
        2048,
    ),
    (
        "set in an except handler",
        """
        try:
            from sglang.srt.layers.limits import FUSE_LIMIT
        except ImportError:
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 512
        """,
        512,
    ),
    (
        "set in a try's else",
        """
        try:
            import flashinfer.comm as flashinfer_comm
        except ImportError:
            flashinfer_comm = None
        else:
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 256
        """,
        256,
    ),
    (
        "set in a try's finally",
        """
        try:
            import flashinfer.comm as flashinfer_comm
        except ImportError:
            flashinfer_comm = None
        finally:
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 640
        """,
        640,
    ),
    (
        "annotated",
        """
        FUSE_ALLREDUCE_MAX_BATCH_SIZE: int = 2048
        """,
        2048,
    ),
    (
        "set once, beside other annotated names",
        """
        _workspace: object | None = None
        FUSE_ALLREDUCE_MAX_BATCH_SIZE = 1536
        """,
        1536,
    ),
    (
        "set to a different value in each branch: not one limit",
        """
        if _is_hip:
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 1024
        else:
            FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048
        """,
        None,
    ),
    (
        "read from the environment, beside the gate method's literal: not an integer",
        """
        FUSE_ALLREDUCE_MAX_BATCH_SIZE = int(os.environ.get("SGLANG_FUSE_MAX", "2048"))


        class CommunicateWithAllReduceAndLayerNormFn:
            def _gather_hidden_states_and_residual(self, hidden_states):
                if _is_sm100_supported and hidden_states.shape[0] <= 4096:
                    pass
        """,
        None,
    ),
    (
        "only the gate method's literal (0.5.4 - 0.5.7)",
        """
        class CommunicateWithAllReduceAndLayerNormFn:
            def _gather_hidden_states_and_residual(self, hidden_states):
                if (_is_sm100_supported or _is_sm90_supported) and hidden_states.shape[0] <= 4096:
                    pass
        """,
        4096,
    ),
    (
        "the gate method's literal below the constant: the smaller one lets fewer through",
        """
        FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048


        class CommunicateWithAllReduceAndLayerNormFn:
            def _gather_hidden_states_and_residual(self, hidden_states):
                if _is_sm100_supported and hidden_states.shape[0] <= 1024:
                    pass
        """,
        1024,
    ),
    (
        "the gate class's other methods and another class's method of the gate's name are not the gate",
        """
        FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048


        class CommunicateSimpleFn:
            def _gather_hidden_states_and_residual(self, hidden_states):
                if hidden_states.shape[0] <= 64:
                    pass


        class CommunicateWithAllReduceAndLayerNormFn:
            def _scatter_hidden_states(self, batch_size):
                if batch_size <= 128:
                    pass

            def _gather_hidden_states_and_residual(self, hidden_states):
                if _is_sm100_supported and hidden_states.shape[0] <= 4096:
                    pass
        """,
        2048,
    ),
    (
        "the gate method's literal at the end of a chained comparison",
        """
        class CommunicateWithAllReduceAndLayerNormFn:
            def _gather_hidden_states_and_residual(self, hidden_states):
                if _is_sm100_supported and 0 < hidden_states.shape[0] <= 4096:
                    pass
        """,
        4096,
    ),
    (
        "a lower bound on the batch beside the gate method's literal is not a limit",
        """
        class CommunicateWithAllReduceAndLayerNormFn:
            def _gather_hidden_states_and_residual(self, hidden_states):
                if hidden_states.shape[0] > 0 and hidden_states.shape[0] <= 4096:
                    pass
        """,
        4096,
    ),
    (
        "another size compared with a literal in the gate method is not the batch's limit",
        """
        class CommunicateWithAllReduceAndLayerNormFn:
            def _gather_hidden_states_and_residual(self, hidden_states):
                if self.attn_tp_size <= 8 and hidden_states.shape[0] <= 4096:
                    pass
        """,
        4096,
    ),
    (
        "the batch below a literal with < is not the form of sglang's limit: none read",
        """
        class CommunicateWithAllReduceAndLayerNormFn:
            def _gather_hidden_states_and_residual(self, hidden_states):
                if _is_sm100_supported and hidden_states.shape[0] < 4096:
                    pass
        """,
        None,
    ),
    (
        "the batch compared with a name or a float in the gate method: only the constant is a limit",
        """
        FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048


        class CommunicateWithAllReduceAndLayerNormFn:
            def _gather_hidden_states_and_residual(self, hidden_states):
                if hidden_states.shape[0] <= self.max_tokens and hidden_states.shape[0] <= 1024.0:
                    pass
        """,
        2048,
    ),
]


@pytest.mark.parametrize(("source", "limit"), [(s, n) for _, s, n in GATE_MODULES], ids=[w for w, _, _ in GATE_MODULES])
def test_the_limit_read_is_the_largest_batch_the_gate_fuses(source: str, limit: int | None) -> None:
    assert limit_in(textwrap.dedent(source).encode()) == limit


@pytest.mark.parametrize(("source", "limit"), [(s, n) for _, s, n in GATE_MODULES], ids=[w for w, _, _ in GATE_MODULES])
def test_the_patch_reads_the_same_limit(source: str, limit: int | None) -> None:
    """What doctor and verify say is in force is what ``apply --fuse-up-to`` would lower (or,
    with None, refuse to touch)."""
    found = limit_sites(cst.parse_module(textwrap.dedent(source)))
    assert (limit_in_force(found[0]) if not isinstance(found, str) and found[0] else None) == limit
