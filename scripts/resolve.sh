#!/usr/bin/env bash
# Write what setup.sh installs, every package pinned and each file's sha256 hash beside it:
#   requirements/resolved.txt, requirements/resolved-kaggle-image.txt  the versions pip resolves for the requirements
#                                                                      (test profile, Kaggle image), with uv's hashes
#                                                                      of every file of each version on PyPI
#   requirements/pip.txt, requirements/uv.txt                           the installers setup.sh runs (--require-hashes)
# Run it after changing a requirements file or an installer's version (setup.sh's stamp then sees the new
# resolution), on Linux x86_64 with the Python the project is tested with; a package another platform needs and this
# one does not is simply unpinned (and unhashed) there (a constraint only applies to a package something asks for).
#   scripts/resolve.sh               # everything
#   scripts/resolve.sh kaggle-image  # one profile (and the installers)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
PIP_VERSION=26.3  # the installers' versions: their one home (setup.sh installs what requirements/pip.txt and uv.txt say)
UV_VERSION=0.13.9
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT  # on a failure too
quiet() { "$@" 2> >(grep -v "is ignored: it is neither" >&2); }  # (pip's lines about a pip.conf's absent indexes)
"$python" -m pip install --quiet --root-user-action=ignore --target "$work/uv" "uv==$UV_VERSION" 2> >(grep -v "is ignored: it is neither" >&2)
uv=$work/uv/bin/uv
hashed() {  # hashed OUT INPUT [uv pip compile options]: every file's hash of each pinned version, from PyPI
  local out=$1 input=$2; shift 2
  "$uv" pip compile --quiet --generate-hashes --no-header --no-annotate "$@" "$input" -o "$out.tmp"
}
echo "pip==$PIP_VERSION" > "$work/pip.in"; echo "uv==$UV_VERSION" > "$work/uv.in"
for tool in pip uv; do
  hashed "requirements/$tool.txt" "$work/$tool.in" --universal
  { echo "# the installer setup.sh runs, pinned by hash (pip --require-hashes): scripts/resolve.sh"
    cat "requirements/$tool.txt.tmp"; } > "requirements/$tool.txt"; rm "requirements/$tool.txt.tmp"
done
for profile in ${1:-test kaggle-image}; do
  case "$profile" in test) out=requirements/resolved.txt ;; kaggle-image) out=requirements/resolved-kaggle-image.txt ;;
    *) echo "usage: scripts/resolve.sh [test|kaggle-image]" >&2; exit 2 ;; esac
  rm -rf "$work/venv"
  "$python" -m venv "$work/venv"
  quiet "$work/venv/bin/python" -m pip install --quiet --require-hashes -r requirements/pip.txt
  quiet "$work/venv/bin/python" -m pip install --quiet -r "requirements/$profile.txt"
  "$work/venv/bin/python" -m pip freeze --exclude-editable > "$work/frozen.txt"
  # pip's versions, each with the hashes of its files (uv's compile, held to pip's resolution by the freeze)
  hashed "$out" "requirements/$profile.txt" -c "$work/frozen.txt" --python "$work/venv/bin/python"
  { echo "# pip's resolution of requirements/$profile.txt ($("$python" --version), $(uname -m)), with each file's hash:"
    echo "# scripts/resolve.sh"
    cat "$out.tmp"; } > "$out"
  rm "$out.tmp"
  echo "resolve: wrote $out" >&2
done
