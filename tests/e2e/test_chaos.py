"""The chaos campaign (bench/chaos.py), short and seeded: one fault of every kind (but those
COVERED_ELSEWHERE) on real trainings, what a user would do after each, and every invariant of the
report holding. The campaign of 100+ faults is run by hand (docs/operations.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, cli_env

CHAOS = REPO / "bench" / "chaos.py"


# Each has its own e2e test with the same fault, which checks what the campaign's invariants check for it:
# stop-rank test_watchdog; pg-restart-trial and pg-restart-report test_sweep_outage's two workers through an
# 8 s restart mid trial, which an epoch's report meets and waits out (no FAIL, every trial's run once), and its
# worker that waits to ask and to tell and keeps beating; kill-sweep-parent test_sweep's kill -9 of
# the sweep command (its workers and trial end, the trial is retried, none twice) and test_slurm's cancelled
# array task; kill-sweep-worker test_sweep_postgres's worker killed mid trial on PostgreSQL (FAIL by heartbeat,
# retried, every trial's run once); slurm-time-limit and slurm-requeue test_slurm's time limit and its requeue
# while epoch 2 trains, resumed with each epoch once in events and W&B. In the campaign they took 4 to 6
# minutes of the suite. Without the Slurm and sweep kinds the campaign starts no cluster and no PostgreSQL: it
# runs beside test_slurm (it had the `slurm` xdist group, and ran in series with test_slurm).
# kill-submit test_resume's kill -9 of the submit's group mid epoch 2 (the worker follows, resume: each epoch once in
# events, results.csv and W&B, the registry's row, one run folder); kill-worker test_resume's SIGKILL of the training
# process alone mid epoch 2 (failed in one line, resume: the same checks). The campaign took 233 s with them (e1868d4)
# and 208 s without (4d35f2b), one run each on a Zen 4.
# disk-full test_failing_storage's full disk during epoch 2's checkpoint (epoch 1's kept whole, the note says the
# disk is full, resumed once there is space: each epoch once in events, results.csv and W&B, the registry's row);
# corrupt-checkpoint test_resume's damaged last.pt and best.pt (resumed from the newest whole checkpoint, the
# epochs after it trained again: each once in results.csv and W&B). The campaign took 256 s with them (42b0d8a,
# the Zen 2 of docs/testing.md).
# ray-node-loss test_ray's worker node killed inside epoch 2 (the run finished on the node left, re-planned, each epoch
# once in events and W&B); the campaign would start a second Ray cluster for it.
COVERED_ELSEWHERE = ("stop-rank", "kill-sweep-parent", "kill-sweep-worker", "pg-restart-trial", "pg-restart-report",
                     "slurm-time-limit", "slurm-requeue", "kill-submit", "kill-worker", "disk-full",
                     "corrupt-checkpoint", "ray-node-loss")


def kinds_here() -> list[str]:
    """Every kind but COVERED_ELSEWHERE; in CI all of them must run (root, PostgreSQL and Slurm are
    there), elsewhere the ones this machine allows."""
    import chaos_slurm
    import chaos_sweep
    from chaos import KINDS
    from orchestrator.harness.services import postgres_bin

    kinds = [k for k in KINDS if k not in COVERED_ELSEWHERE]
    if os.environ.get("CI", "").lower() == "true":
        return kinds
    return [k for k in kinds if (k != "disk-full" or os.geteuid() == 0)
            and (k not in chaos_sweep.KINDS or postgres_bin() is not None)
            and (k not in chaos_slurm.KINDS or not chaos_slurm.usable())]


@pytest.mark.slow
def test_a_short_seeded_campaign_loses_nothing(tmp_path):
    kinds = kinds_here()
    r = subprocess.run([sys.executable, str(CHAOS), "--faults", str(len(kinds)), "--seed", "1", "--json",
                        "--kinds", ",".join(kinds), "--work", str(tmp_path / "campaign")], cwd=REPO, env=cli_env(),
                       capture_output=True, text=True, timeout=900)
    assert r.returncode in (0, 1), r.stderr[-3000:]
    report = json.loads(r.stdout)
    broken = [i for i in report["invariants"] if not i["holds"]]
    assert r.returncode == 0 and report["lost"] == 0 and not broken, (broken, r.stderr[-3000:])
    assert set(report["by_kind"]) == set(kinds) and report["faults"] == len(kinds)
    assert all(k["survived"] == k["injected"] for k in report["by_kind"].values())


@pytest.mark.parametrize("args,message", [
    (["--kinds", "kill-worker,unplug-the-moon"], "--kinds: unknown fault kind unplug-the-moon; expected some of"),
    (["--faults", "0"], "--faults: 0 must be at least 1"),
    (["--kinds", ","], "--kinds: no fault kind in ','"),
])
def test_bad_input_to_the_campaign_is_one_line(tmp_path, args, message):
    r = subprocess.run([sys.executable, str(CHAOS), *args, "--work", str(tmp_path / "c")], cwd=REPO, env=cli_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr
    assert not (tmp_path / "c").exists()  # nothing made


@pytest.mark.slow
def test_sigterm_of_the_campaign_stops_its_trainings(tmp_path):
    """SIGTERM while a run trains: one line, exit 143, and no process that names the campaign's folder is
    left (it left its trainings, its PostgreSQL and its Slurm daemons running before)."""
    import signal
    import time

    import psutil

    work = tmp_path / "campaign"
    proc = subprocess.Popen([sys.executable, str(CHAOS), "--faults", "1", "--seed", "3", "--kinds", "kill-worker",
                             "--work", str(work)], cwd=REPO, env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not list(work.glob("runs/chaos/*/events.jsonl")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "chaos: stopped (signal 15)" in err and "Traceback" not in err, err
    time.sleep(1)
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if str(work) in " ".join(p.info["cmdline"] or [])]
    assert not left, left


def _campaign_process(script: str, tmpdir) -> subprocess.Popen:
    """A Python process running `script` with bench/ on its path and TMPDIR at `tmpdir` (where its temporary
    PostgreSQL folders go); it prints a line once its services run."""
    env = cli_env({"TMPDIR": str(tmpdir), "PYTHONPATH": f"{REPO / 'bench'}{os.pathsep}{REPO}"})
    return subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


@pytest.fixture
def open_tmpdir():
    """A temporary folder outside any 0700 one (the PostgreSQL server runs as `postgres` when this is root)."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="yolo-orch-chaos-leftovers-", dir="/tmp")
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("sig", ["SIGHUP", "SIGTERM"])
def test_a_campaign_closed_by_its_terminal_or_killed_leaves_no_server_and_no_folder(tmp_path, open_tmpdir, sig):
    """Issue 60: SIGHUP (a closed terminal) left the campaign's PostgreSQL server running; now it ends as SIGTERM
    and Ctrl-C do: the server stopped, its folder gone."""
    import signal
    from pathlib import Path

    from orchestrator.harness.processes import processes_naming
    from orchestrator.harness.services import postgres_bin

    if postgres_bin() is None:
        pytest.fail("no PostgreSQL server binaries") if os.environ.get("CI") else pytest.skip("no PostgreSQL")
    proc = _campaign_process(f"""import time
from pathlib import Path
import chaos
with chaos.services_stopped_however_it_ends(Path({str(tmp_path)!r})) as services:
    print(services.pg.folder, flush=True)
    time.sleep(600)
""", open_tmpdir)
    folder = Path(proc.stdout.readline().strip())
    assert folder.is_dir() and processes_naming(str(folder)), proc.stderr.read() if proc.poll() is not None else ""
    os.kill(proc.pid, getattr(signal, sig))
    proc.wait(timeout=60)
    assert not folder.exists() and not processes_naming(str(folder))


def test_a_sigterm_while_postgresql_starts_leaves_no_folder(open_tmpdir):
    """Issue 60: a SIGTERM during initdb left its 39 MB folder behind."""
    from pathlib import Path

    from orchestrator.harness.services import postgres_bin

    if postgres_bin() is None:
        pytest.fail("no PostgreSQL server binaries") if os.environ.get("CI") else pytest.skip("no PostgreSQL")
    proc = _campaign_process("""import os, signal, threading
import chaos
from orchestrator.harness.services import PrivateServer
signal.signal(signal.SIGTERM, chaos._raise_terminated)
print("starting", flush=True)
threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
try:
    PrivateServer()
except chaos.Terminated:
    print("terminated", flush=True)
""", open_tmpdir)
    out, err = proc.communicate(timeout=120)
    assert out.split() == ["starting", "terminated"], out + err
    assert list(Path(open_tmpdir).glob("yolo-orch-pg-*")) == []
