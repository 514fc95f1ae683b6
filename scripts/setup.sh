#!/usr/bin/env bash
# Create or update the project's virtual environment. Idempotent: when nothing
# changed since the last run it returns in about a second.
#
#   scripts/setup.sh               # runtime environment (train, plan, sweep)
#   scripts/setup.sh test          # plus torch-xla and the test tools
#   scripts/setup.sh kaggle-image  # .venv-kaggle-image: only the Kaggle TPU image's torch,
#                                  # torchvision and torch_xla (the emulated image the tests use)
#
# YOLO_ORCH_VENV picks the folder (default .venv); PYTHON the interpreter (>= 3.10).
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${1:-base}
case "$profile" in base|test|kaggle-image) ;;
  *) echo "usage: scripts/setup.sh [base|test|kaggle-image]" >&2; exit 2;; esac
venv=${YOLO_ORCH_VENV:-.venv}
[ "$profile" = kaggle-image ] && venv=.venv-kaggle-image
python=${PYTHON:-python3}

stamp_of() {
  if [ "$profile" = kaggle-image ]; then cat requirements/kaggle-image.txt; else
    cat requirements/base.txt requirements/test.txt pyproject.toml; fi | sha256sum | cut -c1-16
}
stamp="$profile-$(stamp_of)"
stamp_file="$venv/.yolo-orch-setup"

if [ -x "$venv/bin/python" ] && [ -f "$stamp_file" ] && grep -qx -- "$stamp" "$stamp_file"; then
  echo "setup: $venv is up to date ($profile)" >&2
  exit 0
fi
# A test environment also serves the base profile.
if [ "$profile" = base ] && [ -f "$stamp_file" ] && grep -qx -- "test-$(stamp_of)" "$stamp_file"; then
  echo "setup: $venv is up to date (test covers base)" >&2
  exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
    echo "setup: Python >= 3.10 is needed (got $("$python" --version 2>&1)); set PYTHON=" >&2; exit 1; }
  echo "setup: creating $venv with $("$python" --version 2>&1)" >&2
  "$python" -m venv "$venv"
fi

echo "setup: installing requirements/$profile.txt (first run downloads torch: several minutes)" >&2
# The pins keep pip away from the CPU-only torch in a local wheel cache, whose
# torchvision ops do not load (see docs/install.md).
pip_quiet() {  # pip's chatter goes to a log that is shown only when pip fails
  local log; log=$(mktemp)
  if ! "$venv/bin/python" -m pip "$@" >"$log" 2>&1; then
    grep -v "is ignored: it is neither" "$log" >&2; rm -f "$log"; return 1
  fi
  rm -f "$log"
}
pip_quiet install --quiet --upgrade pip
pip_quiet install --quiet -r "requirements/$profile.txt"
[ "$profile" = kaggle-image ] || pip_quiet install --quiet --no-deps -e .
echo "$stamp" >> "$stamp_file"
echo "setup: done; activate with: source $venv/bin/activate" >&2
