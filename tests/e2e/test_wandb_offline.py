"""W&B: with no API key the run logs offline; the files wandb wrote hold the resolved
job, every scaled value with its original, per-epoch and final metrics; no key leaks."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from pathlib import Path

import pytest
import yaml

from conftest import run_cli, write_job
from wandb_records import read_run

pytestmark = pytest.mark.slow
FAKE_KEY = "local-0123456789abcdef0123456789abcdef01234567"


def test_offline_without_key(tmp_path):
    job = write_job(tmp_path, epochs=2, wandb={"project": "orch-test", "group": "g1", "tags": ["t"]},
                    target={"devices": "cpu", "batch": 4})
    result = run_cli("submit", job, "--json", cwd=tmp_path, env={"WANDB_API_KEY": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = Path(json.loads(result.stdout)["run_dir"])
    files = list(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, list(run_dir.rglob("*"))
    run = read_run(files[0])

    cfg = run["config"]
    assert cfg["job"]["name"] == "tiny"
    assert cfg["reference"] == {"devices": "1", "batch": 8, "nbs": 64}
    assert cfg["target"]["devices"] == "cpu"
    # every scaled value is logged next to its original
    assert cfg["scaled"]["batch"]["passed"] == 4
    assert cfg["scaled"]["lr0"] == {"reference": 0.002, "passed": cfg["train_args"]["lr0"]}
    resolved = yaml.safe_load((run_dir / "job.resolved.yaml").read_text())
    assert cfg["effective"] == resolved["plan"]["scaling"]["effective"]
    assert cfg["effective"]["batch_per_device"] == 4
    assert run["run"].project == "orch-test" and run["run"].run_group == "g1"

    epochs = [row for row in run["history"] if "metrics/mAP50(B)" in row]
    assert [row["epoch"] for row in epochs] == [1, 2]
    assert "final/metrics/mAP50-95(B)" in run["summary"]


def test_key_never_written(tmp_path):
    job = write_job(tmp_path, wandb={"mode": "offline"})
    result = run_cli("submit", job, "--json", cwd=tmp_path, env={"WANDB_API_KEY": FAKE_KEY})
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = Path(json.loads(result.stdout)["run_dir"])
    assert list(run_dir.glob("wandb/offline-run-*"))
    leaks = [p for p in run_dir.rglob("*") if p.is_file() and FAKE_KEY.encode() in p.read_bytes()]
    assert not leaks, f"API key found in {leaks}"
    assert FAKE_KEY not in result.stdout + result.stderr


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _RejectingWandb(http.server.BaseHTTPRequestHandler):
    """A W&B server on loopback that rejects every key (the real one cannot be reached from here)."""

    def do_POST(self):
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"errors": [{"message": "invalid api key"}]}')

    do_GET = do_POST

    def log_message(self, *args):
        pass


@pytest.fixture
def rejecting_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RejectingWandb)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize("server", ["unreachable", "rejects-key"])
def test_online_that_cannot_start_logs_offline(tmp_path, server, request):
    """A key in the environment on a node without W&B (or with a key W&B rejects) must not cost the
    run: it trains to the end, logs offline, and says once how to upload later."""
    url = f"http://127.0.0.1:{_closed_port()}" if server == "unreachable" else request.getfixturevalue(
        "rejecting_server")
    job = write_job(tmp_path, epochs=2, wandb={"project": "orch-test"})
    env = {"WANDB_API_KEY": FAKE_KEY, "WANDB_BASE_URL": url, "WANDB_MODE": ""}
    plan = run_cli("plan", job, cwd=tmp_path, env=env)
    assert plan.returncode == 0 and "W&B: online (an API key is configured)" in plan.stdout, plan.stdout
    started = time.monotonic()
    result = run_cli("submit", job, "--json", cwd=tmp_path, env=env)
    wall = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["state"] == "finished" and summary["summary"]["epochs_completed"] == 2
    assert result.stderr.count("W&B online could not start") == 1, result.stderr
    assert "wandb sync" in result.stderr and FAKE_KEY not in result.stdout + result.stderr
    run_dir = Path(summary["run_dir"])
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events].count("warning") == 1
    files = list(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1
    history = [row for row in read_run(files[0])["history"] if "metrics/mAP50(B)" in row]
    assert [row["epoch"] for row in history] == [1, 2]
    assert wall < 90, f"{wall:.0f} s: the fallback must not wait for wandb's 90 s init timeout"


def test_offline_logs_a_classify_runs_own_metrics(tmp_path):
    """Another task's run logs its own metrics (top-1/top-5) per epoch and in the summary."""
    job = write_job(tmp_path, name="cls", model="yolo11n-cls.yaml", epochs=2, wandb={"project": "orch-test"})
    result = run_cli("submit", job, "--json", cwd=tmp_path, env={"WANDB_API_KEY": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = Path(json.loads(result.stdout)["run_dir"])
    run = read_run(next(run_dir.glob("wandb/offline-run-*/run-*.wandb")))
    assert run["config"]["job"]["task"] == "classify"
    epochs = [row for row in run["history"] if "metrics/accuracy_top1" in row]
    assert [row["epoch"] for row in epochs] == [1, 2]
    assert "final/metrics/accuracy_top5" in run["summary"]
