#!/usr/bin/env bash
# A headless browser for the dashboard's tests (tests/e2e/test_ui.py): Debian's chromium, installed
# when missing (root and apt needed; about a minute). Prints the browser's path.
set -euo pipefail
for name in chromium chromium-browser google-chrome; do
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; exit 0; fi
done
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "browser.sh: no chromium, and no root apt-get to install it (apt-get install chromium)" >&2; exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Two test processes (pytest-xdist) may both find no browser: one installs while the other waits for it
# (and for any other apt-get, such as scripts/slurm_cluster.sh's), then finds it installed.
exec 9>/tmp/yolo-orch-apt.lock
flock -w 900 9
if ! command -v chromium >/dev/null 2>&1; then
  apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null 9>&-  # (the lock is this shell's alone: no
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq chromium >/dev/null 9>&-  # process it starts keeps it)
fi
command -v chromium
