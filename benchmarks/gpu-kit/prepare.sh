#!/usr/bin/env bash
# The GPU kit, here (issue 31): fetch the locked wheels, prove the set resolves offline for the device's Python 3.12
# against its image, pack each device call's payload under .device/ (ignored by git), check every sha256, print the
# calls. Needs the package index (about 960 MiB of wheels, 20 s here) and a Python 3.12 (pyenv's, or PY312=...) for
# the resolution check; about 2 GiB of disk. Rerunning it is cheap: wheels already there are kept when their sha256
# matches. benchmarks/gpu-kit/README.md explains the files and the calls.
set -euo pipefail
cd "$(dirname "$0")/../.."
echo "disk free here: $(df -h --output=avail . | tail -1)"
python3 benchmarks/gpu-kit/kit.py download   # the lock's wheels, sha256-checked (pip download --require-hashes)
python3 benchmarks/gpu-kit/kit.py check      # pip install --dry-run --no-index against stubs of the image's packages
python3 benchmarks/gpu-kit/kit.py pack       # .device/calls/cNN: call 1's wheels, then the pieces; plan.json; the calls
python3 benchmarks/gpu-kit/kit.py verify     # every piece reassembles to its tar's sha256, every wheel to the lock's
