#!/usr/bin/env bash
# Write the versions pip resolves for the requirements, every package pinned, into the files setup.sh holds
# uv to: requirements/resolved.txt (base and test) and requirements/resolved-kaggle-image.txt. Run it after
# changing a requirements file (setup.sh's stamp then sees the new resolution), on Linux x86_64 with the
# Python the project is tested with; a package another platform needs and this one does not is simply
# unpinned there (a constraint only applies to a package something asks for).
#   scripts/resolve.sh               # both
#   scripts/resolve.sh kaggle-image  # one
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
for profile in ${1:-test kaggle-image}; do
  case "$profile" in test) out=requirements/resolved.txt ;; kaggle-image) out=requirements/resolved-kaggle-image.txt ;;
    *) echo "usage: scripts/resolve.sh [test|kaggle-image]" >&2; exit 2 ;; esac
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT  # on a failure too
  "$python" -m venv "$work/venv"
  # (pip's lines about local indexes a machine's pip.conf names and that are not there are dropped)
  "$work/venv/bin/python" -m pip install --quiet --upgrade pip 2> >(grep -v "is ignored: it is neither" >&2)
  "$work/venv/bin/python" -m pip install --quiet -r "requirements/$profile.txt" 2> >(grep -v "is ignored: it is neither" >&2)
  { echo "# pip's resolution of requirements/$profile.txt ($("$python" --version), $(uname -m)): scripts/resolve.sh"
    "$work/venv/bin/python" -m pip freeze --exclude-editable; } > "$out.tmp"
  mv "$out.tmp" "$out"
  rm -rf "$work"
  echo "resolve: wrote $out" >&2
done
