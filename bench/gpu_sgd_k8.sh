#!/usr/bin/env bash
# Issue #48's GPU rows, on a lent GPU (../shared/gpu.md): SGD from scratch, reference batch 8, k = 8.
#   start:   bash bench/gpu_sgd_k8.sh start     (installs the carried wheels, checks, starts detached, waits)
#   collect: bash bench/gpu_sgd_k8.sh collect   (waits for the detached benches to exit, brings results back)
# Arms: linear and lr0 x sqrt(k) (`auto` on a GPU before issue 48, now the bench arm lr0-sqrt: lr0 0.0283, weight decay 0.00141), seeds 2-7;
# stock Ultralytics (`none`) seeds 2-4. Every training through `yolo-orch submit` (bench/bench_scaling.py).
set -uo pipefail
W=/tmp/i48; mkdir -p "$W"
source "$(dirname "$0")/gpu_common.sh"
if [ "$1" = start ]; then
  t0=$(date +%s)
  gpu_prepare || exit 3
  common="--device 0 --ks 8 --optimizers SGD --ref-batch 8 --skip-reference"
  setsid nohup python bench/bench_scaling.py $common --policies linear auto --seeds 2 3 4 5 6 7 --parallel 6 \
      --work "$W/a" --out "$W/h200-sgd-k8-linear-sqrt-s2-7.json" > "$W/a.log" 2>&1 < /dev/null &
  setsid nohup python bench/bench_scaling.py $common --policies none --seeds 2 3 4 --parallel 3 \
      --work "$W/b" --out "$W/h200-sgd-k8-none-s2-4.json" > "$W/b.log" 2>&1 < /dev/null &
  sleep 45; head -5 "$W/a.log" "$W/b.log"
  # the plan's passed values for each arm, for the record (no torch)
  for p in linear auto none; do python -m orchestrator plan "$W/a/SGD.yaml" --json --set target.batch=64 --set scaling.policy=$p \
     | python -c "import json,sys; e=json.load(sys.stdin)[0]['passed']; print('$p', e.get('lr0'), e.get('weight_decay'), e.get('warmup_epochs'))"; done
  wait_running 560 "$t0"
  tail -n 4 "$W/a.log" "$W/b.log"; keep
else
  t0=$(date +%s)
  wait_running "${2:-250}" "$t0"
  running && echo "STILL RUNNING after ${2:-250} s" && pgrep -af bench_scaling.py | head
  cat "$W/a.log" "$W/b.log"; keep
  tar czf "$OUT/runs.tgz" --exclude='*.pt' --exclude='*.jpg' --exclude='*.png' --exclude='*.cache' --exclude='images' -C "$W" a/runs b/runs 2>/dev/null
  ls -la "$OUT"
fi
