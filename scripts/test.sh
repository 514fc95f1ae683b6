#!/usr/bin/env bash
# Install the test environment (idempotent) and run the whole test suite.
#   scripts/test.sh                 # everything (what CI runs)
#   scripts/test.sh tests/unit      # no training: about 2 minutes (tests/e2e: the rest)
#   scripts/test.sh -m "not slow"   # everything that trains nothing or little
# Extra arguments go to pytest. Two test processes share the machine (pytest-xdist; most end-to-end tests
# wait on processes, services and timeouts more than they compute): YOLO_ORCH_TEST_WORKERS=0 runs one.
set -euo pipefail
cd "$(dirname "$0")/.."
# the two environments at once: mostly downloads and unpacking, which overlap well
bash scripts/setup.sh kaggle-image & image=$!   # the emulated Kaggle TPU image (tests/e2e/test_kaggle_image.py)
bash scripts/setup.sh test
wait "$image"
# Bytecode for the package and the campaigns the tests start as processes: with PYTHONDONTWRITEBYTECODE set (as
# on this project's machines) every CLI, runner and training process would compile them again at its start.
"${YOLO_ORCH_VENV:-.venv}/bin/python" -m compileall -q orchestrator bench tests/helpers
export PJRT_DEVICE=${PJRT_DEVICE:-CPU}   # torch-xla tests run XLA on the CPU
# XLA:CPU stands in for the TPU's cores: its LLVM code generation at -O0 compiles the tests' graphs about a third
# faster; the graphs, their number and the sharding (what the tests check) are the same (docs/testing.md)
export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_backend_optimization_level=0"
export YOLO_OFFLINE=1
exec "${YOLO_ORCH_VENV:-.venv}/bin/python" -m pytest -n "${YOLO_ORCH_TEST_WORKERS:-2}" --dist loadgroup "$@"
