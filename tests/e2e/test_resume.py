"""Resume: a real kill -9 of the whole orchestrator process group after the first epoch's
checkpoint, the registry marking it killed on the next read, `yolo-orch resume` finishing
the remaining epochs without repeating epoch 1; refusals; re-planning on another device count."""

from __future__ import annotations

import json
import os
import signal
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import (DEFAULT_WANDB, TINY_JOB, cli_env, no_links, read_events, run_cli, wait_first_epoch, wandb_epochs,
                      write_job)
from orchestrator.harness.runs import walk_to
from orchestrator.registry import Registry
from orchestrator.rundir import process_alive, trained_epochs
from orchestrator.rundir.checkpoints import results_epochs
from tests.helpers.checkpoints import write_checkpoint
from tests.helpers.registry_rows import forge_row

NO_ENV_REGISTRY = {"YOLO_ORCH_REGISTRY": ""}


@pytest.mark.slow
def test_kill9_process_group_then_resume(tmp_path, record_property):
    """With the W&B default (offline): the resumed run continues its W&B run, each epoch once."""
    job = write_job(tmp_path, epochs=3, wandb=DEFAULT_WANDB)
    runs = tmp_path / "runs"
    # hold epoch 2 so the kill lands mid-training at a known point (test-only fault hook)
    env = cli_env({**NO_ENV_REGISTRY, "YOLO_ORCH_FAULT_SLEEP": "epoch=2,seconds=300"})
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "submit", str(job)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    run_dir = wait_first_epoch(runs, proc)
    t_epoch = time.time()
    assert (run_dir / "weights" / "last.pt").is_file()
    with Registry.open(runs) as reg:
        before = reg.get(run_dir.name)
    assert before.state == "running" and before.worker_pid

    os.killpg(proc.pid, signal.SIGKILL)  # the orchestrator's whole process group
    proc.wait(30)
    t_kill = time.time()
    # the worker (its own session) follows its orchestrator (PR_SET_PDEATHSIG / watchdog): no orphan
    deadline = time.time() + 20
    while process_alive(before.worker_pid, before.worker_start) and time.time() < deadline:
        time.sleep(0.1)
    assert not process_alive(before.worker_pid, before.worker_start), "worker survived its orchestrator"
    t_worker_gone = time.time()

    r = run_cli("runs", "--json", cwd=tmp_path, env=NO_ENV_REGISTRY)
    assert r.returncode == 0, r.stderr
    row = next(x for x in json.loads(r.stdout) if x["id"] == run_dir.name)
    assert row["state"] == "killed", row
    assert row["epochs_done"] == 1
    assert any("vanished" in n["text"] for n in row["notes"])
    epochs_before = [e["epoch"] for e in read_events(run_dir) if e["event"] == "epoch"]
    assert epochs_before == [1]

    t_resume = time.time()
    r = run_cli("resume", run_dir.name[:17], "--json", cwd=tmp_path, env=NO_ENV_REGISTRY)
    t_done = time.time()
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["state"] == "finished" and out["resumed_from_epoch"] == 2 and out["run_id"] == run_dir.name

    events = read_events(run_dir)
    starts = [e for e in events if e["event"] == "train_start"]
    assert [s["start_epoch"] for s in starts] == [0, 1]
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2, 3]  # epoch 1 not repeated
    log = (run_dir / "train.log").read_text()
    assert "Resuming training" in log and "from epoch 2 to 3 total epochs" in log
    assert "Resume ignores" not in log  # the resumed args are exactly the run's resolved ones
    rows = (run_dir / "results.csv").read_text().strip().splitlines()[1:]
    assert [int(float(line.split(",")[0])) for line in rows] == [1, 2, 3]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["epochs_completed"] == 3
    assert not (run_dir / "weights" / "resume.pt").exists()
    assert len(list(run_dir.glob("wandb/offline-run-*"))) == 2  # one W&B run id, a folder per attempt
    assert wandb_epochs(run_dir) == [1, 2, 3] and not no_links(run_dir)

    with Registry.open(runs) as reg:
        final = reg.get(run_dir.name)
    assert final.state == "finished" and final.attempts == 2 and final.epochs_done == 3
    assert final.metrics and any("resume from epoch 2/3" in n.text for n in final.notes)
    assert len(list(runs.glob("tiny/*"))) == 1  # same run dir, same row

    timings = {"first_epoch_s": round(t_epoch - t0, 1), "worker_gone_after_kill_s": round(t_worker_gone - t_kill, 2),
               "resume_to_finished_s": round(t_done - t_resume, 1)}
    record_property("timings", timings)
    print("resume timings", timings)


def _fake_run(runs: Path, state: str, *, last: bool = True, pid: int | None = None) -> str:
    run_id = f"20260101-00000{len(list(runs.glob('tiny/*')))}-abcd"
    d = runs / "tiny" / run_id
    (d / "weights").mkdir(parents=True)
    plan = {"devices": "cpu", "train_args": {"epochs": 3}}
    (d / "job.resolved.yaml").write_text(yaml.safe_dump({"run_id": run_id, "job": {"name": "tiny", "epochs": 3},
                                                          "plan": plan}))
    if last:
        (d / "weights" / "last.pt").write_bytes(b"x")
    with Registry.open(runs) as reg:
        reg.add_run(run_id, job="tiny", run_dir=d, devices="cpu", pid=pid)
        walk_to(reg, run_id, state)
    return run_id


def test_resume_refusals(tmp_path):
    runs = tmp_path / "runs"
    finished = _fake_run(runs, "finished")
    running = _fake_run(runs, "running", pid=os.getpid())  # this process: alive
    no_ckpt = _fake_run(runs, "killed", last=False, pid=1 << 22)
    cases = [
        ((finished,), "finished all its epochs"),
        ((running,), "is still running"),
        ((no_ckpt,), "stopped before its first epoch ended"),
        (("zzz",), "RUN: no run matches 'zzz'"),
        ((no_ckpt, "--devices", "gpu7"), "--devices: 'gpu7' is not a device spec"),
    ]
    for args, message in cases:
        r = run_cli("resume", *args, "--runs-dir", runs, env=NO_ENV_REGISTRY, timeout=60)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert message in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
    with Registry.open(runs) as reg:  # refusals leave the rows as they were
        assert reg.get(no_ckpt).state == "killed" and reg.get(finished).state == "finished"


def test_resume_on_another_device_count_is_replanned(tmp_path, monkeypatch):
    """cpu -> cpu:2: the scaler re-plans (total batch doubles, accumulation halves): same images
    per optimizer step; the worker gets it as a `resume` section in job.resolved.yaml."""
    monkeypatch.setenv("YOLO_ORCH_REGISTRY", "")
    from orchestrator import resume, runner
    from orchestrator.plan import make_plan
    from orchestrator.jobspec.loader import load_job

    job = write_job(tmp_path, TINY_JOB, epochs=3, reference={"devices": 1, "batch": 4, "nbs": 16})
    plan = make_plan(load_job(job))
    run_id, run_dir = runner.create_run(plan, runs_dir=tmp_path / "runs")
    (run_dir / "results.csv").write_text("epoch,x\n1,0\n")  # epoch 1's row, then its checkpoint, as a run writes them
    write_checkpoint(run_dir / "weights" / "last.pt", 1)
    with Registry.open(tmp_path / "runs") as reg:
        reg.move(run_id, "killed")
        row = reg.get(run_id)
    info = resume.prepare(row, devices="cpu:2")
    new = info.plan
    old_eff = plan.scaled.effective
    assert info.replanned and info.from_epoch == 2
    assert new.devices == "cpu:2" and new.world_size == 2
    assert new.batch == 8 and new.batch_per_device == new.effective["batch_per_device"] == 4
    assert new.images_per_step == old_eff["images_per_step"] == 16
    assert new.train_args["lr0"] == plan.train_args["lr0"]
    resolved = yaml.safe_load((run_dir / "job.resolved.yaml").read_text())
    assert resolved["resume"] == {"checkpoint": "weights/last.pt", "if_missing": "fail", "reason": "resume"}
    assert resolved["plan"]["devices"] == "cpu:2" and resolved["resumes"][-1]["previous_devices"] == "cpu"
    with Registry.open(tmp_path / "runs") as reg:
        row = reg.get(run_id)
    assert row.state == "queued" and row.devices == "cpu:2"


def test_an_epoch_without_its_checkpoint_keeps_one_results_row(tmp_path, monkeypatch):
    """Killed between Ultralytics' results.csv row of epoch 2 and its last.pt: the resume trains epoch 2
    again, so its first row moves to results.rewound.csv (users plot results.csv: each epoch once)."""
    monkeypatch.setenv("YOLO_ORCH_REGISTRY", "")
    from orchestrator import resume, runner
    from orchestrator.jobspec.loader import load_job
    from orchestrator.plan import make_plan

    plan = make_plan(load_job(write_job(tmp_path, TINY_JOB, epochs=3)))
    run_id, run_dir = runner.create_run(plan, runs_dir=tmp_path / "runs")
    write_checkpoint(run_dir / "weights" / "last.pt", 1)
    os.utime(run_dir / "weights" / "last.pt", (1, 1))  # older than the row of epoch 2
    (run_dir / "results.csv").write_text("epoch,x\n1,0.1\n2,0.2\n")
    with Registry.open(tmp_path / "runs") as reg:
        reg.move(run_id, "killed")
        row = reg.get(run_id)
    info = resume.prepare(row)
    assert info.from_epoch == 2 and "epoch(s) 2 ended without a checkpoint and train again" in info.note
    assert (run_dir / "results.csv").read_text() == "epoch,x\n1,0.1\n"
    assert (run_dir / "results.rewound.csv").read_text() == "epoch,x\n2,0.2\n"
    # killed again before epoch 2 ends: the next resume still counts epoch 1 (the chaos campaign's kill-twice
    # once moved epoch 1's row aside too, when the rewritten results.csv looked newer than last.pt)
    with Registry.open(tmp_path / "runs") as reg:
        reg.move(run_id, "killed")
        row = reg.get(run_id)
    again = resume.prepare(row)
    assert again.from_epoch == 2 and "without a checkpoint" not in again.note
    assert (run_dir / "results.csv").read_text() == "epoch,x\n1,0.1\n"
    # a requeued Slurm job whose run has a row but never a checkpoint starts again from epoch 1
    (run_dir / "weights" / "last.pt").unlink()
    with Registry.open(tmp_path / "runs") as reg:
        reg.move(run_id, "killed")
        row = reg.get(run_id)
    start = resume.prepare(row, restart_ok=True)
    assert start.from_epoch == 1 and (run_dir / "results.csv").read_text() == "epoch,x\n"


@pytest.mark.slow
def test_resume_on_two_cpu_processes(tmp_path):
    """Killed on `cpu`, resumed on `cpu:2` (torchrun, gloo): re-planned batch 8 = 4 per rank,
    accumulate 2, the same 16 images per optimizer step; epochs 2 and 3 only; W&B's default on."""
    job = write_job(tmp_path, TINY_JOB, epochs=3, reference={"devices": 1, "batch": 4, "nbs": 16},
                    wandb=DEFAULT_WANDB)
    env = cli_env({**NO_ENV_REGISTRY, "YOLO_ORCH_FAULT_SLEEP": "epoch=2,seconds=300"})
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "submit", str(job)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    run_dir = wait_first_epoch(tmp_path / "runs", proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    r = run_cli("resume", run_dir.name, "--devices", "cpu:2", "--json", cwd=tmp_path, env=NO_ENV_REGISTRY)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["state"] == "finished" and out["replanned"] and out["devices"] == "cpu:2"
    starts = [e for e in read_events(run_dir) if e["event"] == "train_start"]
    assert [(s["batch"], s["accumulate"], s["world_size"], s["start_epoch"]) for s in starts] == \
        [(4, 4, 0, 0), (8, 2, 2, 1)]
    assert starts[0]["batch"] * starts[0]["accumulate"] == starts[1]["batch"] * starts[1]["accumulate"] == 16
    assert [e["epoch"] for e in read_events(run_dir) if e["event"] == "epoch"] == [1, 2, 3]
    assert wandb_epochs(run_dir) == [1, 2, 3] and not no_links(run_dir)
    with Registry.open(tmp_path / "runs") as reg:
        row = reg.get(run_dir.name)
    assert row.state == "finished" and row.devices == "cpu:2"


@pytest.mark.slow
def test_worker_killed_by_a_signal_says_which_and_how_to_continue(tmp_path):
    """The kernel's OOM killer sends the worker SIGKILL: submit ends `failed` with one line naming the
    signal, the epochs done and the resume command (no traceback tail), and resume finishes it with each epoch
    once in events, results.csv and W&B (the default, offline): the chaos campaign's kill-worker, checked here."""
    job = write_job(tmp_path, epochs=3, wandb=DEFAULT_WANDB)
    runs = tmp_path / "runs"
    env = cli_env({**NO_ENV_REGISTRY, "YOLO_ORCH_FAULT_SLEEP": "epoch=2,seconds=300"})
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "submit", str(job), "--json"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    run_dir = wait_first_epoch(runs, proc)
    with Registry.open(runs) as reg:
        worker = reg.get(run_dir.name).worker_pid
    os.kill(worker, signal.SIGKILL)  # the worker only, as the OOM killer would
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    result = json.loads(out)
    assert result["state"] == "failed"
    assert "killed by SIGKILL" in result["note"] and "1 of 3 epochs done" in result["note"]
    assert f"yolo-orch resume {run_dir.name}" in result["note"]
    failure = [line for line in err.splitlines() if line.startswith("training failed:")]
    assert len(failure) == 1 and "full log:" in failure[0] and "Traceback" not in err
    r = run_cli("runs", "--json", cwd=tmp_path, env=NO_ENV_REGISTRY)
    row = next(x for x in json.loads(r.stdout) if x["id"] == run_dir.name)
    assert row["state"] == "failed" and row["epochs_done"] == 1
    assert any("killed by SIGKILL" in n["text"] for n in row["notes"])
    r = run_cli("resume", run_dir.name, "--json", cwd=tmp_path, env=NO_ENV_REGISTRY)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["state"] == "finished"
    assert [e["epoch"] for e in read_events(run_dir) if e["event"] == "epoch"] == [1, 2, 3]
    rows = (run_dir / "results.csv").read_text().strip().splitlines()[1:]
    assert [int(float(line.split(",")[0])) for line in rows] == [1, 2, 3]
    assert wandb_epochs(run_dir) == [1, 2, 3]
    with Registry.open(runs) as reg:
        assert reg.get(run_dir.name).state == "finished" and reg.get(run_dir.name).attempts == 2
    assert len(list(runs.glob("tiny/*"))) == 1


@pytest.mark.slow
def test_a_run_killed_after_its_last_epoch_is_closed_not_retrained(tmp_path):
    """Killed during the final validation (a Slurm requeue near the end): every epoch is in
    results.csv, so `resume` trains nothing; it closes the run as finished with the last epoch's
    metrics and says so. (The kill is simulated on a real finished run: its summary removed and
    its registry row marked killed, as the orchestrator leaves them.) With the W&B default on: its W&B
    run is finished with each epoch once."""
    job = write_job(tmp_path, TINY_JOB, wandb=DEFAULT_WANDB)
    r = run_cli("submit", job, "--json", cwd=tmp_path, env=NO_ENV_REGISTRY)
    assert r.returncode == 0, r.stderr[-2000:]
    run_id, run_dir = json.loads(r.stdout)["run_id"], Path(json.loads(r.stdout)["run_dir"])
    (run_dir / "summary.json").unlink()
    events = (run_dir / "events.jsonl").read_text().splitlines(keepends=True)  # killed before the epoch's event
    (run_dir / "events.jsonl").write_text("".join(e for e in events if json.loads(e)["event"] == "train_start")
                                          + '{"event": "epoch", "epo')  # and the kill tore a line
    forge_row(tmp_path / "runs" / "registry.db", run_id, state="killed", exit_code=130)
    last = run_dir / "weights" / "last.pt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])  # and the kill cut last.pt
    r = run_cli("resume", run_id, "--json", cwd=tmp_path, env=NO_ENV_REGISTRY)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["state"] == "finished" and "closed as finished" in out["note"]
    # what a closed run keeps is whole: the cut last.pt is set aside, by name, and best.pt said whole
    assert "weights/last.pt is damaged" in out["note"] and "whole: weights/best.pt" in out["note"], out["note"]
    assert not last.exists() and (run_dir / "weights" / "last.pt.damaged").is_file()
    assert out["summary"]["last"] is None and out["summary"]["best"]
    assert wandb_epochs(run_dir) == [1]
    assert out["summary"]["epochs_completed"] == 1 and "metrics/mAP50-95(B)" in out["summary"]["metrics"]
    assert [e["event"] for e in read_events(run_dir)].count("train_start") == 1  # nothing trained again
    [epoch] = [e for e in read_events(run_dir) if e["event"] == "epoch"]  # its event, from its results.csv row
    assert epoch["epoch"] == 1 and epoch["recovered"] and "metrics/mAP50-95(B)" in epoch["metrics"]
    with Registry.open(tmp_path / "runs") as reg:
        assert reg.get(run_id).state == "finished"


@pytest.mark.slow
def test_a_damaged_last_pt_resumes_from_the_newest_whole_checkpoint(tmp_path):
    """weights/last.pt damaged before the resume (a copy cut short, a failing disk) and best.pt too: the
    resume continues from the newest whole checkpoint (epoch<N>.pt of save_period), trains the epochs
    after it again and says so: a `rewind` event, their results.csv rows moved aside, the damaged file
    kept as last.pt.damaged. With no whole checkpoint, the refusal says what to do and changes nothing.
    With the W&B default (offline): each epoch once in results.csv and W&B, an epoch trained again keeping its
    first values there (the chaos campaign's corrupt-checkpoint fault, which the suite's campaign leaves here)."""
    job = write_job(tmp_path, epochs=4, overrides={"save_period": 1, "workers": 0, "plots": False},
                    wandb=DEFAULT_WANDB)
    runs = tmp_path / "runs"
    env = cli_env({**NO_ENV_REGISTRY, "YOLO_ORCH_FAULT_SLEEP": "epoch=4,seconds=300"})
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "submit", str(job), "--json"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    run_dir = wait_first_epoch(runs, proc)
    deadline = time.time() + 300
    while trained_epochs(run_dir / "events.jsonl") != [1, 2, 3]:
        assert time.time() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() is not None else ""
        time.sleep(0.2)
    with Registry.open(runs) as reg:
        os.kill(reg.get(run_dir.name).worker_pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    weights = run_dir / "weights"
    for name in ("last.pt", "best.pt", "epoch2.pt"):  # epoch<N>.pt: N counts from 0
        data = (weights / name).read_bytes()
        (weights / name).write_bytes(data[: len(data) // 2])
    damaged = (weights / "last.pt").read_bytes()
    for name in ("epoch0.pt", "epoch1.pt"):  # first nothing whole: refused, the row as it was
        (weights / name).rename(weights / f"{name}.away")
    r = run_cli("resume", run_dir.name, cwd=tmp_path, env=NO_ENV_REGISTRY)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "is damaged" in r.stderr and "no other checkpoint of the run" in r.stderr
    assert "submit the job again" in r.stderr
    with Registry.open(runs) as reg:
        assert reg.get(run_dir.name).state == "failed"
    for name in ("epoch0.pt", "epoch1.pt"):
        (weights / f"{name}.away").rename(weights / name)

    r = run_cli("resume", run_dir.name, "--json", cwd=tmp_path, env=NO_ENV_REGISTRY)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["state"] == "finished" and out["summary"]["epochs_completed"] == 4
    assert out["resumed_from_epoch"] == 3 and "weights/last.pt is damaged" in out["resume_note"]
    assert "continued from weights/epoch1.pt (epoch 2); epoch(s) 3 train again" in out["resume_note"]
    [rewind] = [e for e in read_events(run_dir) if e["event"] == "rewind"]
    assert rewind["to_epoch"] == 3 and rewind["epochs"] == [3] and rewind["checkpoint"] == "weights/epoch1.pt"
    assert trained_epochs(run_dir / "events.jsonl") == [1, 2, 3, 4]
    assert (weights / "last.pt.damaged").read_bytes() == damaged
    assert (run_dir / "results.rewound.csv").read_text().splitlines()[1].split(",")[0].strip() == "3"
    assert results_epochs(run_dir) == [1, 2, 3, 4] and wandb_epochs(run_dir) == [1, 2, 3, 4]
    with Registry.open(runs) as reg:
        row = reg.get(run_dir.name)
    assert row.state == "finished" and row.epochs_done == 4



@pytest.mark.slow
def test_resume_makes_its_generated_dataset_again_when_it_is_gone(tmp_path):
    """The dataset cache was cleaned (or the resume runs on another node): the generated dataset is made
    again before the worker starts, and the run finishes (it used to die mid-run: Dataset ... does not exist)."""
    job = write_job(tmp_path, epochs=3)
    runs, cache = tmp_path / "runs", tmp_path / "cache"
    env = cli_env({**NO_ENV_REGISTRY, "YOLO_ORCH_CACHE": str(cache), "YOLO_ORCH_FAULT_SLEEP": "epoch=2,seconds=300"})
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "submit", str(job), "--json"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    run_dir = wait_first_epoch(runs, proc)
    with Registry.open(runs) as reg:
        os.kill(reg.get(run_dir.name).worker_pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    [generated] = (cache / "datasets").iterdir()
    shutil.rmtree(generated)
    r = run_cli("resume", run_dir.name, "--json", cwd=tmp_path, env={**NO_ENV_REGISTRY, "YOLO_ORCH_CACHE": str(cache)})
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["state"] == "finished" and out["summary"]["epochs_completed"] == 3
    assert (generated / "data.yaml").is_file()
    show = run_cli("show", run_dir.name, "--json", cwd=tmp_path, env=NO_ENV_REGISTRY)
    notes = [n["text"] for n in json.loads(show.stdout)["run"]["notes"]]
    assert any("its generated dataset" in n and "was missing here: generated again as" in n for n in notes), notes


LEGACY = Path(__file__).resolve().parents[1] / "assets" / "rundir-v1"


def test_a_run_directory_written_before_layout_versions_still_resumes(tmp_path):
    """tests/assets/rundir-v1: a run as yolo-orch wrote it before job.resolved.yaml carried
    schema_version (2026-11-26): a tiny model, epoch 1 of 2 trained, its worker killed. Kept as written,
    its absolute paths replaced by placeholders filled in here, as Optuna keeps old databases: today's
    resume must finish it (its generated dataset is made again here), and writes it back in today's layout."""
    [src] = (LEGACY / "legacy").iterdir()
    runs, cache, run_id = tmp_path / "runs", tmp_path / "cache", src.name
    run_dir = runs / "legacy" / run_id
    shutil.copytree(src, run_dir)
    places = {"@RUN_DIR@": str(run_dir), "@CACHE@": str(cache), "@HOME@": str(tmp_path),
              "@REPO@": str(Path(__file__).resolve().parents[2])}
    for name in ("job.resolved.yaml", "args.yaml", "train.log"):
        text = (run_dir / name).read_text()
        for mark, path in places.items():
            text = text.replace(mark, path)
        (run_dir / name).write_text(text)
    assert "schema_version" not in (run_dir / "job.resolved.yaml").read_text()
    row_written = (run_dir / "results.csv").stat().st_mtime_ns + 10**9  # (a checkout's order of files:) as the
    os.utime(run_dir / "weights" / "last.pt", ns=(row_written, row_written))  # run wrote them, last.pt after its row
    with Registry.open(runs) as reg:
        reg.add_run(run_id, job="legacy", run_dir=run_dir, devices="cpu", epochs=2)
        reg.move(run_id, "failed", epochs_done=1)
    env = {**NO_ENV_REGISTRY, "YOLO_ORCH_CACHE": str(cache)}
    r = run_cli("resume", run_id, "--runs-dir", runs, "--json", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["state"] == "finished" and out["resumed_from_epoch"] == 2
    assert [e["epoch"] for e in read_events(run_dir) if e["event"] == "epoch"] == [1, 2]
    assert yaml.safe_load((run_dir / "job.resolved.yaml").read_text())["schema_version"] == 1
