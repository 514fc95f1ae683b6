# What every lent-GPU bench script shares (../shared/gpu.md); sourced, with W (the work folder) set first:
#   gpu_prepare                 install the carried wheels (.whl/) into /tmp/site, print the card, versions, host CPU
#   keep                        copy W's results JSONs and logs to $OUT (what comes back)
#   running                     whether a bench_scaling.py started by the script is still running
#   wait_running SECONDS SINCE  wait while one runs, at most SECONDS after the epoch time SINCE
export PYTHONPATH=/tmp/site:$PWD YOLO_OFFLINE=1  # the repository: the benches import orchestrator (and its harness)
keep() { cp -f "$W"/*.json "$W"/*.log "$OUT"/ 2>/dev/null; true; }
running() { pgrep -f "bench/bench_scaling.py" >/dev/null; }
wait_running() { while running && [ $(( $(date +%s) - $2 )) -lt "$1" ]; do sleep 5; done; }
gpu_prepare() {
  pip install --quiet --no-index --no-deps --target /tmp/site .whl/*.whl || return 3
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python -c "import torch, ultralytics, pydantic; print('torch', torch.__version__, 'ultralytics', ultralytics.__version__, 'cuda', torch.cuda.is_available())" || return 3
  lscpu | grep -E "Model name|^CPU\(s\)"
}
