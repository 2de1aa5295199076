#!/bin/sh
# Start sglang's server only while the SM120 patches are in place.
#
# `sm120patch verify` exits 1 when a patch is missing (sglang was upgraded or reinstalled
# after the image was built) and 2 when sglang cannot be found; the container then stops
# with its report on stderr instead of serving without the fused allreduce.
set -e
sm120patch verify
exec python -m sglang.launch_server "$@"
