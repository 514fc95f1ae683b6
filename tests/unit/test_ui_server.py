"""The dashboard's server (orchestrator/ui/server.py) as an adversary meets it, through Starlette's test
client over the real app, store and files: a run folder's files never leak a secret nor run as pages of
the dashboard, only loopback Host names are answered, query values are bounded, a huge or hostile
events.jsonl makes a bounded answer, and a registry that is no registry is refused at start in one line.
The browser side (plotly drawing under the Content-Security-Policy) is tests/e2e/test_ui.py's."""

from __future__ import annotations

import json
import random
import socket
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from conftest import run_cli
from orchestrator.harness.runs import walk_to
from orchestrator.registry import Registry
from orchestrator.ui.server import LOOPBACK_NAMES, create_app, host_name
from orchestrator.ui.store import MAX_CURVES, Store

SECRET = "S3CRET-4711-server"


def _runs(tmp_path: Path) -> tuple[Path, Path]:
    runs = tmp_path / "runs"
    run_dir = runs / "job" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "train.log").write_text(
        f"connecting to postgresql://bob:{SECRET}@db/x\npassword={SECRET}\nWANDB_API_KEY={SECRET}\n"
        f"Authorization: Bearer {SECRET}\napi_key: sk-{SECRET}\n")
    (run_dir / "evil.html").write_text("<script>fetch('/api/runs').then(r => r.text()).then(alert)</script>")
    (run_dir / "evil.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg' onload='alert(1)'/>")
    (run_dir / "plot.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    with Registry.open(runs) as reg:
        reg.add_run("r1", job="job", run_dir=run_dir)
        walk_to(reg, "r1", "finished")
    return runs, run_dir


def _client(runs: Path, allowed=LOOPBACK_NAMES) -> TestClient:
    return TestClient(create_app(Store(runs / "registry.db"), runs, allowed), base_url="http://127.0.0.1:8765")


def test_files_are_masked_and_never_served_as_pages(tmp_path):
    runs, _ = _runs(tmp_path)
    client = _client(runs)
    log = client.get("/files/r1/train.log")
    assert log.status_code == 200 and SECRET not in log.text and "bob" in log.text, log.text
    assert log.headers["content-type"].startswith("text/plain")
    for name in ("evil.html", "evil.svg"):
        r = client.get(f"/files/r1/{name}")
        assert r.headers["content-type"] == "application/octet-stream"
        assert r.headers["content-disposition"].startswith("attachment")
    assert client.get("/files/r1/plot.png").headers["content-type"] == "image/png"
    for r in (log, client.get("/"), client.get("/api/runs")):
        assert r.headers["x-content-type-options"] == "nosniff"
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert r.headers["x-frame-options"] == "DENY"


@pytest.mark.parametrize("host", ["attacker.example:8765", "attacker.example", "127.0.0.1.attacker.example"])
def test_a_foreign_host_header_is_refused(tmp_path, host):
    """DNS rebinding: a web page's script reaches 127.0.0.1 under its own host name."""
    runs, _ = _runs(tmp_path)
    r = _client(runs).get("/api/runs", headers={"Host": host})
    assert r.status_code == 421 and "r1" not in r.text
    assert _client(runs, allowed=None).get("/api/runs", headers={"Host": host}).status_code == 200  # --host widened


def test_loopback_names_with_their_ports_are_answered(tmp_path):
    runs, _ = _runs(tmp_path)
    for host in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765", "localhost"):
        assert _client(runs).get("/api/runs", headers={"Host": host}).status_code == 200, host
    assert host_name("[::1]:80") == "::1" and host_name("::1") == "::1" and host_name("a.b:1") == "a.b"


def test_query_values_are_bounded(tmp_path):
    runs, _ = _runs(tmp_path)
    client = _client(runs)
    for query in ("page=999999999999999999999999", "page=-5", "page=1e9", "page=" + "9" * 5000):
        r = client.get(f"/api/runs?{query}")
        assert r.status_code == 200, (query, r.text)
    assert client.get("/api/run/r1?after=999999999999999999999999999").status_code == 200


def test_a_huge_events_file_makes_a_bounded_answer(tmp_path):
    """200 epochs, each with 500 keys of its own: 100,000 distinct curves would be ~120 MB of nulls."""
    runs, run_dir = _runs(tmp_path)
    with open(run_dir / "events.jsonl", "w") as f:
        for epoch in range(1, 201):
            metrics = {f"metrics/k{epoch}_{i}": 0.5 for i in range(500)}
            metrics["metrics/mAP50-95(B)"] = epoch / 200
            f.write(json.dumps({"event": "epoch", "epoch": epoch, "metrics": metrics}) + "\n")
        f.write(json.dumps({"event": "warning", "message": "x", "deep": json.loads("[" * 500 + "]" * 500)}) + "\n")
        f.write("[" * 100_000 + "]" * 100_000 + "\n")
    r = _client(runs).get("/api/run/r1")
    events = r.json()["events"]
    assert len(r.content) < 2_000_000, len(r.content)
    assert len(events["curves"]) == MAX_CURVES + 1 and events["curves"]["metrics/mAP50-95(B)"][-1] == 1.0
    # both hostile lines are unreadable (one too deep to parse, one too deep to show), the rest is drawn
    assert events["curves_left_out"] == 200 * 500 + 1 - MAX_CURVES and events["unreadable_lines"] == 2


def test_the_events_are_read_on_from_the_last_read(tmp_path):
    runs, run_dir = _runs(tmp_path)
    store = Store(runs / "registry.db")
    path = run_dir / "events.jsonl"
    path.write_text(json.dumps({"event": "epoch", "epoch": 1, "metrics": {"m": 1}}) + "\n" + '{"event": "ep')
    assert store.events(run_dir)["curves"]["epoch"] == [1]
    with open(path, "a") as f:  # the torn line is finished, then another epoch
        f.write('och", "epoch": 2, "metrics": {"m": 2}}\n' + json.dumps({"event": "epoch", "epoch": 3}) + "\n")
    assert store.events(run_dir)["curves"] == {"epoch": [1, 2, 3], "m": [1, 2, None]}
    path.write_text(json.dumps({"event": "epoch", "epoch": 1, "metrics": {"m": 5}}) + "\n")  # replaced
    assert store.events(run_dir)["curves"] == {"epoch": [1], "m": [5]}


# the noise is seeded: each test process collects the same ids (pytest-xdist refuses a run where they differ)
@pytest.mark.parametrize("content", [b"just text\n", random.Random(0).randbytes(4096), "notes (x)", "runs (x)"],
                         ids=["text", "noise", "notes table", "runs table"])
def test_a_registry_that_is_no_registry_is_refused_at_start(tmp_path, content):
    runs = tmp_path / "runs"
    runs.mkdir()
    if isinstance(content, str):  # another program's SQLite database (one with a `runs` table of its own too)
        import sqlite3

        with sqlite3.connect(runs / "registry.db") as conn:
            conn.execute(f"CREATE TABLE {content}")
    else:
        (runs / "registry.db").write_bytes(content)
    r = run_cli("ui", "--runs-dir", runs, "--port", "0")
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    assert "cannot be read as a yolo-orch registry" in r.stderr


def test_a_port_in_use_and_an_ipv6_host_are_one_line(tmp_path):
    runs, _ = _runs(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run_cli("ui", "--runs-dir", runs, "--port", str(port))
    assert r.returncode == 2 and f"cannot listen on 127.0.0.1 port {port}" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0


def test_an_ipv6_loopback_host_is_taken_as_written_and_printed_as_a_url(tmp_path):
    import subprocess
    import sys

    from conftest import cli_env

    runs, _ = _runs(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "ui", "--runs-dir", str(runs), "--host", "[::1]",
                             "--port", "0"], env=cli_env(), stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(30)
    assert line.startswith("yolo-orch ui: http://[::1]:") and "warning" not in line, line


# Secrets in the shapes logs and dumped configs hold them (issue 60): each line names a secret by its key or its
# header, and the value must not be served by /files/R/train.log nor /api/run/R (the run's note and events).
SECRET_FORMS = [
    "{'api_key': 'sk-live-%s'}", '{"mlflow_tracking_token": "%s"}', "Authorization: token ghp_%s",
    "X-Api-Key: %s", "Cookie: session=%s", "passphrase=%s", "private_key: %s", "Authorization: Bearer %s",
    "Bearer abcdefghijklmnop%s", "export WANDB_API_KEY='%s'", "{'headers': {'Authorization': 'token %s'}}",
    "Set-Cookie: sid=%s; HttpOnly", '"secret_key": "%s"', "PGPASSWORD=%s psql", "access-key: %s",
]
PLAIN = ["keypoints: 17 of the pose task", "basic augmentation on", "tokens in a caption: 12"]


@pytest.mark.parametrize("form", SECRET_FORMS)
def test_a_secret_in_any_syntax_is_masked_in_the_log_and_the_run_api(tmp_path, form):
    secret = "zq" + "x" * 6  # letters only: no digit for a heuristic to key on
    runs, run_dir = _runs(tmp_path)
    line = form % secret
    (run_dir / "train.log").write_text(f"{line}\n" + "\n".join(PLAIN) + "\n")
    (run_dir / "events.jsonl").write_text(json.dumps({"event": "warning", "message": line}) + "\n")
    with Registry.open(runs) as reg:
        reg.update("r1", note=line)
    client = _client(runs)
    log = client.get("/files/r1/train.log")
    api = client.get("/api/run/r1")
    assert log.status_code == 200 and api.status_code == 200
    assert secret not in log.text and secret not in api.text, (log.text, api.text)
    assert all(plain in log.text for plain in PLAIN), log.text
