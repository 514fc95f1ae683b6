#!/usr/bin/env bash
# Create or update the project's virtual environment. Idempotent: when nothing
# changed since the last run it returns in about a second.
#
#   scripts/setup.sh               # runtime environment (train, plan, sweep)
#   scripts/setup.sh ray           # plus Ray, for runs placed on a Ray cluster (--launcher ray)
#   scripts/setup.sh test          # plus Ray, torch-xla and the test tools
#   scripts/setup.sh kaggle-image  # .venv-kaggle-image: only the Kaggle TPU image's torch,
#                                  # torchvision and torch_xla (the emulated image the tests use)
#
# YOLO_ORCH_VENV picks the folder (default .venv); PYTHON the interpreter (>= 3.10).
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${1:-base}
case "$profile" in base|ray|test|kaggle-image) ;;
  *) echo "usage: scripts/setup.sh [base|ray|test|kaggle-image]" >&2; exit 2;; esac
venv=${YOLO_ORCH_VENV:-.venv}
[ "$profile" = kaggle-image ] && venv=.venv-kaggle-image
python=${PYTHON:-python3}

# what pip resolved for each profile, every package's version (scripts/resolve.sh writes them)
resolved=requirements/resolved.txt
[ "$profile" = kaggle-image ] && resolved=requirements/resolved-kaggle-image.txt
stamp_of() {
  if [ "$profile" = kaggle-image ]; then cat requirements/kaggle-image.txt "$resolved"; else
    cat requirements/base.txt requirements/ray.txt requirements/test.txt pyproject.toml "$resolved"; fi |
    cat - requirements/pip.txt requirements/uv.txt | sha256sum | cut -c1-16
}
stamp="$profile-$(stamp_of)"
stamp_file="$venv/.yolo-orch-setup"

if [ -x "$venv/bin/python" ] && [ -f "$stamp_file" ] && grep -qx -- "$stamp" "$stamp_file"; then
  echo "setup: $venv is up to date ($profile)" >&2
  exit 0
fi
# A test environment also serves the base and ray profiles.
if [ "$profile" != test ] && [ -f "$stamp_file" ] && grep -qx -- "test-$(stamp_of)" "$stamp_file"; then
  echo "setup: $venv is up to date (test covers $profile)" >&2
  exit 0
fi

# A half-made environment (setup killed during `python -m venv`: a python without pip) is made again; a folder
# that is not a virtual environment is left alone and named.
if [ -e "$venv" ] && ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  if [ ! -f "$venv/pyvenv.cfg" ] && [ -n "$(ls -A "$venv" 2>/dev/null)" ]; then
    echo "setup: $venv exists and is not a virtual environment; move it away or set YOLO_ORCH_VENV" >&2; exit 1
  fi
  echo "setup: $venv is half-made (no working pip: an interrupted setup?); making it again" >&2
  rm -rf "$venv"
fi
if [ ! -x "$venv/bin/python" ]; then
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
    echo "setup: Python >= 3.10 is needed (got $("$python" --version 2>&1)); set PYTHON=" >&2; exit 1; }
  echo "setup: creating $venv with $("$python" --version 2>&1)" >&2
  "$python" -m venv "$venv"
fi

echo "setup: installing requirements/$profile.txt (first run downloads torch: several minutes)" >&2
quietly() {  # an installer's chatter goes to a log that is shown only when it fails (without pip's lines
  local log; log=$(mktemp)  # about local indexes a machine's pip.conf names and that are not there)
  if ! "$@" >"$log" 2>&1; then
    grep -v "is ignored: it is neither" "$log" >&2; rm -f "$log"; return 1
  fi
  rm -f "$log"
}
pip_quiet() { quietly "$venv/bin/python" -m pip "$@"; }
# the venv's own pip (the release matrix installs Ultralytics with it) and uv, each pinned by the hashes of its files
# (requirements/pip.txt, uv.txt: scripts/resolve.sh writes them)
pip_quiet install --quiet --require-hashes -r requirements/pip.txt
# uv installs the wheels, pinned, from a folder of its own (nothing of it stays in the venv): the same wheels
# about six times faster than pip (the test profile: 21 s against 2 min 8 s, caches warm, 2 cores of a Zen 4).
# The resolved file holds it to the versions pip resolved: its own resolver would pick others (an older
# graphene, to take python-dateutil 4). It looks at PyPI alone, never at a local wheel cache, whose CPU-only
# torch's torchvision ops do not load (docs/install.md).
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
pip_quiet install --quiet --require-hashes --target "$tools" -r requirements/uv.txt
# --verify-hashes: each file installed must match a hash the resolved file gives for its version (every package on
# Linux x86_64, where the file was resolved; elsewhere a package only another platform needs has none)
uv_install() { quietly "$tools/bin/uv" pip install --quiet --verify-hashes --python "$venv/bin/python" --compile-bytecode "$@"; }
uv_install -r "requirements/$profile.txt" -c "$resolved"
[ "$profile" = kaggle-image ] || uv_install --no-deps -e .
echo "$stamp" >> "$stamp_file"
echo "setup: done; activate with: source $venv/bin/activate" >&2
