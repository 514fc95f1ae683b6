#!/usr/bin/env bash
# Issue #51's scaling rows for the two per-pixel tasks, on a lent GPU (../shared/gpu.md): semantic and depth,
# YOLO26 from scratch on their generated data, SGD and AdamW, reference batch 16 (nbs 16), k = 4 under
# stock Ultralytics (`none`) and `auto`, seeds 0 and 1. Every training through `yolo-orch submit`
# (bench/bench_scaling.py); the two tasks' benches run side by side.
#   start:   bash bench/gpu_pixel_tasks.sh start     (installs the carried wheels, checks, starts detached, waits)
#   collect: bash bench/gpu_pixel_tasks.sh collect   (waits for the detached benches to exit, brings results back)
# Size: IMAGES (default 1024) at 64 px, EPOCHS (default 20), PARALLEL trainings per task (default 6).
set -uo pipefail
W=/tmp/i51; mkdir -p "$W"
IMAGES=${IMAGES:-1024} EPOCHS=${EPOCHS:-20} PARALLEL=${PARALLEL:-6}
source "$(dirname "$0")/gpu_common.sh"
if [ "$1" = start ]; then
  t0=$(date +%s)
  gpu_prepare || exit 3
  for task in semantic depth; do
    setsid nohup python bench/bench_scaling.py --task $task --device 0 --optimizers SGD AdamW --ks 4 \
        --policies none auto --seeds 0 1 --images "$IMAGES" --epochs "$EPOCHS" --parallel "$PARALLEL" \
        --work "$W/w-$task" --out "$W/bench_scaling_${task}_h200.json" > "$W/$task.log" 2>&1 < /dev/null &
  done
  sleep 60; head -5 "$W/semantic.log" "$W/depth.log"
  wait_running 560 "$t0"
  tail -n 4 "$W/semantic.log" "$W/depth.log"; keep
else
  t0=$(date +%s)
  wait_running "${2:-250}" "$t0"
  running && echo "STILL RUNNING after ${2:-250} s" && pgrep -af bench_scaling.py | head
  cat "$W/semantic.log" "$W/depth.log"; keep
  tar czf "$OUT/runs.tgz" --exclude='*.pt' --exclude='*.jpg' --exclude='*.png' --exclude='*.cache' --exclude='images' -C "$W" w-semantic/runs w-depth/runs 2>/dev/null
  ls -la "$OUT"
fi
