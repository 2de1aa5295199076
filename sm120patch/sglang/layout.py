"""Where sglang keeps what the patches change (paths relative to the ``sglang`` package).

Files move between releases; each patch's anchor table (``Patch.anchors``) says which file
held its target in which releases, and the patch reads the first of them that exists.
"""

COMMUNICATOR = "srt/layers/communicator.py"  # fusion gate and SM flags, 0.4.9 - 0.5.20
ADD_NORM = "srt/layers/layer_boundary/residual/add_norm.py"  # the same, 0.5.21+
SERVER_ARGS = "srt/server_args.py"  # model auto-enable up to 0.5.14
OVERRIDES = "srt/arg_groups/overrides.py"  # model auto-enable from 0.5.15
COMM_FUSION = "srt/layers/flashinfer_comm_fusion.py"  # preflight 0.5.11+, resolver 0.5.14+

#: Where sglang's SM helpers are imported from (``utils`` re-exports ``utils.common``).
HELPER_MODULES = ("sglang.srt.utils", "sglang.srt.utils.common")
SM120_HELPER = "is_sm120_supported"  # the helper sglang.srt.utils defines from 0.5.4
SM120_FLAG = "_is_sm120_supported"  # the module-level flag the patches cache it in
