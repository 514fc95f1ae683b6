#!/usr/bin/env bash
# Install the test environment (idempotent) and run the whole test suite.
#   scripts/test.sh                 # everything (what CI runs)
#   scripts/test.sh -m "not slow"   # the fast subset, a few minutes
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
export PJRT_DEVICE=${PJRT_DEVICE:-CPU}   # torch-xla tests run XLA on the CPU
export YOLO_OFFLINE=1
exec "${YOLO_ORCH_VENV:-.venv}/bin/python" -m pytest "$@"
