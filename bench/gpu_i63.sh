#!/usr/bin/env bash
# Issue #63 item 6 on a lent GPU (../shared/gpu.md): the overhead table, alone on the GPU
# (bench/bench_gpu_overhead.py: plain YOLO(...).train against yolo-orch submit --devices 0 with the same resolved
# arguments, ABBA order, a compute-bound and a loader-bound cell, 8 trainings), in one call:
#   bash bench/gpu_i63.sh            installs the carried wheels, checks, runs the table, brings the results back
# Item 6's MuSGD rows are not here: docs/scaling.md 7K decided MuSGD from scratch at k = 8 on its fresh CPU pairs,
# and fresh runs of the same hypothesis after seeing that result would be optional stopping (7K point 5: a new
# departure needs a declaration and runs of its own).
set -uo pipefail
W=/tmp/i63; mkdir -p "$W"
source "$(dirname "$0")/gpu_common.sh"
gpu_prepare || exit 3
timeout 540 python bench/bench_gpu_overhead.py --device 0 --work "$W/o" --out "$W/gpu_overhead.json" > "$W/o.log" 2>&1
echo "exit $?"; tail -n 20 "$W/o.log"; keep; ls -la "$OUT"
