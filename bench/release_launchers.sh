#!/usr/bin/env bash
# Each launcher on each given Ultralytics release (by hand; CI runs each at its first release only,
# tests/e2e/test_release_matrix.py): the release installed --no-deps into a folder beside the pinned
# torch and put on PYTHONPATH, a tiny job trained through `submit` on cpu:2 (torchrun, gloo) and xla:cpu.
#   bash bench/release_launchers.sh 8.3.229 8.3.253 8.4.0 8.4.190    # one line per release and launcher
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD; py=$(cd "${YOLO_ORCH_VENV:-.venv}/bin" && pwd)/python  # absolute, the venv kept
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$py" -m orchestrator data synth --out "$work/data" --images 16 --val-images 8 --classes 2 --imgsz 64 >/dev/null
cat > "$work/job.yaml" <<JOB
name: launchers
model: yolo11n.yaml
data: $work/data/data.yaml
epochs: 2
imgsz: 64
hyp: {optimizer: AdamW, lr0: 0.002}
reference: {devices: 1, batch: 8}
target: {devices: cpu}
stall_timeout: 60
wandb: {mode: disabled}
overrides: {workers: 0, plots: false}
JOB
for v in "$@"; do
  rel=$work/rel/$v
  "$py" -m pip install -q --no-deps --target "$rel" "ultralytics==$v" >/dev/null 2>&1 || { echo "$v: cannot install"; continue; }
  rm -rf "$rel/tests"  # Ultralytics' own tests package would shadow the repository's
  for target in "cpu:2" "xla:cpu --set target.batch=8 --set model=$repo/tests/assets/tiny-det.yaml"; do
    # shellcheck disable=SC2086
    out=$(cd "$work" && PYTHONPATH="$repo:$rel" PJRT_DEVICE=CPU timeout 900 "$py" -m orchestrator submit job.yaml -d $target \
          --json 2>"$work/err" | "$py" -c "import json,sys; d=json.load(sys.stdin); print(d['state'], d['summary'] and d['summary']['epochs_completed'], 'epochs')" 2>/dev/null \
          || tail -1 "$work/err")
    echo "$v ${target%% *}: $out"
  done
done
