#!/usr/bin/env bash
# The GPU proof from a bare GPU machine (no registry): install the wheels that
# bench/gpu/fetch_wheels.sh downloaded here, then run bench/gpu/proof.py.
#
#   bash bench/gpu/run.sh OUT [proof.py options, e.g. --sections throughput]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$1
shift
ls bench/gpu/wheels/*.whl >/dev/null || {
    echo "run.sh: no wheels in bench/gpu/wheels/: run bench/gpu/fetch_wheels.sh where PyPI is" \
        "reachable, and carry the folder" >&2
    exit 2
}
site=/tmp/physlm-site
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" bench/gpu/wheels/*.whl
# physlm runs from the work tree, uninstalled; the subprocesses (pytest, the ZeRO workers)
# inherit the path
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export DS_ACCELERATOR=cuda  # the DeepSpeed wheel was built on a machine without a GPU
exec python3 bench/gpu/proof.py --out "$out" "$@"
