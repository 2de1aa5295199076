#!/bin/sh
# Start sglang's server only while the SM120 patches are in place.
#
# `sm120patch verify` exits 1 when a patch is missing (sglang was upgraded or reinstalled
# after the image was built) and 2 when sglang cannot be found; the container then stops
# with its report on stderr instead of serving without the fused allreduce.  It checks the
# `python` that serves below, unless SM120PATCH_PYTHON or SM120PATCH_SGLANG_PATH name another.
set -e
sm120patch=/opt/sm120patch/bin/sm120patch  # its own venv, as examples/docker/Dockerfile installs it
[ -x "$sm120patch" ] || sm120patch=sm120patch
if [ -z "${SM120PATCH_PYTHON:-}${SM120PATCH_SGLANG_PATH:-}" ]; then
    SM120PATCH_PYTHON=$(command -v python) || { echo "sm120patch-entrypoint: no python on PATH" >&2; exit 2; }
    export SM120PATCH_PYTHON
fi
"$sm120patch" verify
exec python -m sglang.launch_server "$@"
