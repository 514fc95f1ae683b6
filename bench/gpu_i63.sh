#!/usr/bin/env bash
# Issue #63 item 6 on a lent GPU (../shared/gpu.md), two calls:
#   start:   bash bench/gpu_i63.sh start     installs the carried wheels, checks, starts 7K's MuSGD rows detached
#                                            (from scratch, k = 8, linear and lr0-sqrt, seeds 10-15: 12 trainings
#                                            through `yolo-orch submit`), waits
#   collect: bash bench/gpu_i63.sh collect   waits for them to exit, then the overhead table alone on the GPU
#                                            (bench/bench_gpu_overhead.py: ABBA, a compute-bound and a loader-bound
#                                            cell), brings every result back
set -uo pipefail
W=/tmp/i63; mkdir -p "$W"
source "$(dirname "$0")/gpu_common.sh"
if [ "$1" = start ]; then
  t0=$(date +%s)
  gpu_prepare || exit 3
  setsid nohup python bench/bench_scaling.py --device 0 --parallel 6 --ks 8 --policies linear lr0-sqrt \
      --optimizers MuSGD --ref-batch 8 --seeds 10 11 12 13 14 15 --skip-reference --work "$W/a" \
      --out "$W/bench_scaling_confirm_musgd_k8_gpu.json" > "$W/a.log" 2>&1 < /dev/null &
  sleep 45; head -5 "$W/a.log"
  wait_running 540 "$t0"
  tail -n 4 "$W/a.log"; keep
else
  t0=$(date +%s)
  wait_running "${2:-300}" "$t0"
  if running; then echo "STILL RUNNING after ${2:-300} s: no overhead table (the GPU is shared)"; pgrep -af bench_scaling.py | head
  else python bench/bench_gpu_overhead.py --device 0 --work "$W/o" --out "$W/gpu_overhead.json" > "$W/o.log" 2>&1; fi
  cat "$W/a.log" "$W/o.log" 2>/dev/null | tail -n 40; keep
  tar czf "$OUT/runs.tgz" --exclude='*.pt' --exclude='*.jpg' --exclude='*.png' --exclude='*.cache' --exclude='images' \
      -C "$W" a/runs 2>/dev/null
  ls -la "$OUT"
fi
