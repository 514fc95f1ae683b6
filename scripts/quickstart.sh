#!/usr/bin/env bash
# Install everything (idempotent) and train the quickstart job on this machine's CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${YOLO_ORCH_VENV:-.venv}/bin/yolo-orch" submit examples/quickstart.yaml "$@"
