"""End to end: `yolo-orch submit` trains a real YOLO (1 epoch, tiny generated data)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import DEFAULT_WANDB, REPO, cli_env, run_cli, wandb_epochs, write_job

pytestmark = pytest.mark.slow
NETGUARD = REPO / "tests" / "helpers" / "netguard"


def only_run_dir(tmp_path: Path) -> Path:
    runs = list((tmp_path / "runs" / "tiny").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def test_submit_trains_and_writes_run_dir(tmp_path):
    job = write_job(tmp_path)
    netlog = tmp_path / "net.log"
    started = time.time()
    result = run_cli("submit", job, "--json", cwd=tmp_path,
                     env={"PYTHONPATH": f"{NETGUARD}{os.pathsep}{REPO}", "NETGUARD_LOG": str(netlog)})
    elapsed = time.time() - started
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout)
    assert out["state"] == "finished"
    run_dir = only_run_dir(tmp_path)
    assert Path(out["run_dir"]) == run_dir

    # Run directory contents
    for name in ("job.resolved.yaml", "env.json", "train.log", "events.jsonl", "summary.json", "results.csv",
                 "weights/best.pt", "weights/last.pt"):
        assert (run_dir / name).exists(), name
    resolved = yaml.safe_load((run_dir / "job.resolved.yaml").read_text())
    args = resolved["plan"]["train_args"]
    assert (args["batch"], args["optimizer"], args["lr0"], args["epochs"]) == (8, "AdamW", 0.002, 1)
    effective = resolved["plan"]["scaling"]["effective"]
    assert (effective["batch_per_device"], effective["accumulate"]) == (8, 2)  # capped by 2 batches x 1 epoch
    env = json.loads((run_dir / "env.json").read_text())
    assert env["torch"] and env["ultralytics"] and env["torchvision"]
    assert "Starting training for 1 epochs" in (run_dir / "train.log").read_text()

    # Metrics were produced, once per epoch (the final best.pt validation is not an epoch)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events].count("epoch") == 1
    # the norm Ultralytics clips at 10, per epoch (worker/grad_norm.py): 2 optimizer steps, each measured
    epoch = next(e["metrics"] for e in events if e["event"] == "epoch")
    assert epoch["train/grad_norm_max"] >= epoch["train/grad_norm"] > 0
    assert epoch["train/clip_fraction"] in (0.0, 0.5, 1.0)
    # progress within the epoch: the first batch is always reported, then at most one a second
    progress = [e for e in events if e["event"] == "progress"]
    assert progress and (progress[0]["epoch"], progress[0]["batch"], progress[0]["batches"]) == (1, 1, 2)
    summary = out["summary"]
    assert summary["epochs_completed"] == 1
    for key in ("metrics/mAP50(B)", "metrics/mAP50-95(B)", "metrics/precision(B)"):
        assert 0.0 <= summary["metrics"][key] <= 1.0
    assert summary["best"].endswith("weights/best.pt")

    # Offline: no process of the run tried to reach a non-loopback address
    attempts = netlog.read_text() if netlog.exists() else ""
    assert attempts == "", f"network attempts during training:\n{attempts}"
    assert elapsed < 120, f"1-epoch tiny job took {elapsed:.0f}s"


def test_netguard_catches_attempts(tmp_path):
    """The offline test would be worthless if the guard didn't fire: prove it does."""
    netlog = tmp_path / "net.log"
    code = ("import socket\n"
            "for addr in [('93.184.216.34', 80), ('example.com', 443)]:\n"
            "    try:\n        socket.create_connection(addr, timeout=1)\n    except OSError:\n        pass\n")
    subprocess.run([sys.executable, "-c", code], env=cli_env({"PYTHONPATH": str(NETGUARD), "NETGUARD_LOG": str(netlog)}),
                   check=True)
    log = netlog.read_text()
    assert "connect 93.184.216.34:80" in log and "resolve example.com" in log


def test_ctrl_c_stops_child_and_names_checkpoint(tmp_path):
    """With the W&B default (offline), as the quickstart: Ctrl-C during epoch 2, the summary says how far it got
    and where best.pt is, and the `yolo-orch resume` it suggests finishes the run and its W&B run."""
    job = write_job(tmp_path, epochs=4, wandb=DEFAULT_WANDB)
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "submit", str(job)], cwd=tmp_path,
                            env=cli_env({"YOLO_ORCH_FAULT_SLEEP": "epoch=2,seconds=300"}), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 180
    events = None
    while time.time() < deadline:
        found = list((tmp_path / "runs").glob("tiny/*/events.jsonl"))
        if found and '"event": "epoch"' in found[0].read_text():
            events = found[0]
            break
        time.sleep(0.5)
    assert events is not None, "no epoch finished in time"
    children = _descendants(proc.pid)
    assert children, "training runs in a child process"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "last checkpoint:" in out and "last.pt" in out
    assert re.search(r"epochs\s+│\s+1/4\s", out) and re.search(r"best weights\s+│\s+\S+best\.pt", out), out
    time.sleep(0.5)
    alive = [p for p in children if Path(f"/proc/{p}").exists() and "zombie" not in _state(p)]
    assert not alive, f"processes survived Ctrl-C: {alive}"
    assert (events.parent / "weights" / "last.pt").exists()
    r = run_cli("resume", events.parent.name, "--json", cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "finished", r.stdout + r.stderr
    assert wandb_epochs(events.parent) == [1, 2, 3, 4]


def _descendants(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        p, pp = map(int, line.split())
        children.setdefault(pp, []).append(p)
    result, stack = [], [pid]
    while stack:
        for c in children.get(stack.pop(), []):
            result.append(c)
            stack.append(c)
    return result


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"
