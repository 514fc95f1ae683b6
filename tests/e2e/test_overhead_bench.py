"""bench/bench_gpu_overhead.py's short seeded version on the CPU: the GPU overhead table's mechanics (ABBA
order, the same resolved arguments on both sides, the same timings callbacks through $YOLO_ORCH_CALLBACKS and
harness.plain) before a lent GPU runs the two real cells (bench/gpu_i63.sh)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO


def test_both_sides_train_the_same_training_in_abba_order(tmp_path):
    out = tmp_path / "overhead.json"
    done = subprocess.run([sys.executable, "bench/bench_gpu_overhead.py", "--device", "cpu", "--smoke", "--epochs", "2",
                           "--work", str(tmp_path / "work"), "--out", str(out)], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    cell = json.loads(out.read_text())["cells"]["smoke"]
    assert [r["side"] for r in cell["runs"]] == ["orchestrator", "plain", "plain", "orchestrator"]
    assert cell["same_args"] and all(r["args"]["device"] == "cpu" and r["args"]["epochs"] == 2 for r in cell["runs"])
    # the same training on both sides: the first epoch's loss is the same to the last digit on a CPU
    assert len({r["epoch1_loss"] for r in cell["runs"]}) == 1 and cell["runs"][0]["epoch1_loss"] > 0
    for r in cell["runs"]:
        assert r["images_per_s"] > 0 and 0 <= r["data_wait_share"] < 1
        assert r["peak_gpu_bytes"] is None and r["peak_rss_bytes"] > 0
    assert cell["summary"]["images_per_s_ratio"] > 0
