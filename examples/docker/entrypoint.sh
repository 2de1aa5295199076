#!/bin/sh
# Start sglang's server only while the SM120 patches are in place.
#
# `sm120patch verify` exits 1 when a patch is missing (sglang was upgraded or reinstalled
# after the image was built) and 2 when sglang cannot be found; the container then stops
# with its report on stderr instead of serving without the fused allreduce.  The server runs
# with the interpreter that was verified: SM120PATCH_PYTHON (examples/docker/Dockerfile sets
# it to the image's python), else the `python` on PATH; with only SM120PATCH_SGLANG_PATH set,
# that directory is verified and `python` serves.
set -e
if [ -z "${SM120PATCH_PYTHON:-}${SM120PATCH_SGLANG_PATH:-}" ]; then
    SM120PATCH_PYTHON=$(command -v python) || { echo "sm120patch-entrypoint: no python on PATH" >&2; exit 2; }
    export SM120PATCH_PYTHON
fi
sm120patch verify  # on PATH: the Dockerfile links it from its own venv, /opt/sm120patch
exec "${SM120PATCH_PYTHON:-python}" -m sglang.launch_server "$@"
