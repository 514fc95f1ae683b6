"""Every Ultralytics task through the same spec, launcher and run directory: segment, pose, obb, classify,
semantic and depth each train for real on generated data (detect has its own tests), are killed in epoch 2
and resumed (onto cpu:2 for four of them; the dashboard's run page showing the task's headline); classify and
semantic sweep their trials; every task plans the same from `yolo train` words as from the job file they mean.
A .pt names its own task (read from its checkpoint). Every task's YOLO26 model trains from `yolo train` words."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import TINY_JOB, cli_env, read_events, run_cli, wait_first_epoch, write_job
from orchestrator.harness.dashboard import Dashboard
from orchestrator.tasks import EXAMPLE_MODELS, HEADLINE, METRICS

pytestmark = pytest.mark.slow

OTHER_TASKS = ("segment", "pose", "obb", "classify", "semantic", "depth")
NO_ENV_REGISTRY = {"YOLO_ORCH_REGISTRY": ""}


def task_job(tmp_path: Path, task: str, **changes) -> Path:
    """TINY_JOB for `task`: the task's model (the task comes from it), its generated data."""
    synth = dict(TINY_JOB["data"]["synth"])
    return write_job(tmp_path, **{"name": task, "model": EXAMPLE_MODELS[task], "data": {"synth": synth}, **changes})


# The tasks whose resume goes onto two CPU processes: each task's DDP trainer (worker/ddp.py's TRAINERS) trains
# epoch 2 there, so one training serves the kill, the resume and DDP (a test of its own trained each before).
ON_TWO_PROCESSES = ("classify", "segment", "semantic", "depth")


@pytest.mark.parametrize("task", OTHER_TASKS)
def test_task_trains_is_killed_and_resumes(task, tmp_path, request):
    """Submit 2 epochs, kill -9 the orchestrator's group in epoch 2, resume (onto `cpu:2` for
    ON_TWO_PROCESSES): epoch 2 trains once, the summary holds the task's metrics and the CLI shows its
    headline (mask mAP, pose mAP, top-1)."""
    job = task_job(tmp_path, task, epochs=2)
    runs = tmp_path / "runs"
    env = cli_env({**NO_ENV_REGISTRY, "YOLO_ORCH_FAULT_SLEEP": "epoch=2,seconds=300"})
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "submit", str(job)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    run_dir = wait_first_epoch(runs, proc, job=task)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    resolved = yaml.safe_load((run_dir / "job.resolved.yaml").read_text())
    assert resolved["job"]["task"] == task  # taken from the model
    time.sleep(1)  # the worker follows its orchestrator
    devices = ["--devices", "cpu:2"] if task in ON_TWO_PROCESSES else []
    r = run_cli("resume", run_dir.name, *devices, cwd=tmp_path, env=NO_ENV_REGISTRY, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    events = read_events(run_dir)
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2]
    worlds = [e["world_size"] for e in events if e["event"] == "train_start"]
    assert len(worlds) == 2 and worlds[1] == (2 if devices else worlds[0]), worlds  # 0: one process
    assert (run_dir / "rank1.log").is_file() == bool(devices)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "finished" and summary["epochs_completed"] == 2
    assert set(METRICS[task]) <= set(summary["metrics"]), summary["metrics"]
    assert (run_dir / "weights" / "best.pt").is_file() and (run_dir / "results.csv").is_file()
    for label, _ in HEADLINE[task]:
        assert label in r.stdout, r.stdout
    if task == "segment":
        weights_name_their_task(tmp_path, run_dir / "weights" / "best.pt")
    if task in ("semantic", "depth"):  # the dashboard's run page heads with the task's headline metric
        board = Dashboard(runs, request.getfixturevalue("browser"), tmp_path)
        try:
            head = re.search(r'<section id="head">(.*?)</section>', board.dom(f"/run/{run_dir.name}"), re.S).group(1)
        finally:
            board.stop()
        label, key = HEADLINE[task][-1]
        shown = re.search(rf"{label} ([0-9.e+-]+)", head)
        assert shown and float(shown.group(1)) == pytest.approx(summary["metrics"][key], rel=1e-3), head


# segment, pose and obb are swept as detect is (test_sweep): the same box trainer family, the same objective code
# reading Ultralytics' `fitness`; at e1868d4 their one-trial sweeps here took 13, 14 and 11 s and checked nothing more.
TRIALS = {"classify": 1, "semantic": 2}


@pytest.mark.parametrize("task", TRIALS)
def test_task_sweeps_its_trials(task, tmp_path):
    """A trial for classify (a mean loss, top-1's fitness) and two for semantic (the per-pixel task swept here;
    depth's fitness and metrics go through the same objective code), each with the task's fitness as its value.
    More trials of one study are test_sweep's (detect): the task changes only the trial's training and its objective."""
    task_job(tmp_path, task, epochs=1)
    sweep = {"base": "job.yaml", "study": f"{task}-sweep", "objective": {"metric": "fitness"},
             "pruner": {"name": "none"}, "budget": {"n_trials": TRIALS[task]},
             "space": {"hyp": {"lr0": {"low": 0.001, "high": 0.004, "log": True}}}}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    r = run_cli("sweep", tmp_path / "sweep.yaml", "--json", cwd=tmp_path, env=NO_ENV_REGISTRY, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["states"]["COMPLETE"] == TRIALS[task], out
    assert all(isinstance(t["values"][0], float) for t in out["trials"])


def test_yolo_train_words_plan_each_task_as_its_job_file(tmp_path):
    for task in OTHER_TASKS:
        data = tmp_path / f"data-{task}"
        r = run_cli("data", "synth", "--out", data, "--task", task, "--images", "8", "--val-images", "4",
                    "--imgsz", "64", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        target = data if task == "classify" else data / "data.yaml"
        words = [f"model={EXAMPLE_MODELS[task]}", f"data={target}", "epochs=1", "imgsz=64", "batch=4", "device=cpu",
                 "lr0=0.002", "optimizer=SGD"]
        saved = tmp_path / f"{task}.yaml"
        r = run_cli("train", *words, "--save", saved, "--dry-run", "--json", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        from_words = json.loads(r.stdout)
        r = run_cli("submit", saved, "--dry-run", "--json", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["train_args"] == from_words["train_args"]
        r = run_cli("train", *words, "task=detect", "--dry-run", cwd=tmp_path)
        assert r.returncode == 2 and f"is a {task} model, but the job's task is detect" in r.stderr


def weights_name_their_task(tmp_path: Path, best: Path) -> None:
    """A trained segment .pt (the segment run's above: a test of its own trained one, 18 s of the suite), even
    renamed without -seg, is a segment model: the plan reads its task from the checkpoint (no torch) and refuses
    it under another task; a job trains from it, offline."""
    job = task_job(tmp_path, "segment", epochs=1)
    plain = tmp_path / "weights.pt"
    shutil.copy(best, plain)
    r = run_cli("submit", job, "--set", f"model={plain}", "--dry-run", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = run_cli("plan", job, "--set", f"model={plain}", "--set", "task=detect", cwd=tmp_path)
    assert r.returncode == 2 and "weights.pt is a segment model, but the job's task is detect" in r.stderr
    # and it trains from the file, offline
    r = run_cli("submit", job, "--set", f"model={plain}", "--set", "name=from-weights", cwd=tmp_path,
                env=NO_ENV_REGISTRY, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "mask mAP50-95" in r.stdout


YOLO26 = {"detect": "yolo26n.yaml", "segment": "yolo26n-seg.yaml", "pose": "yolo26n-pose.yaml",
          "obb": "yolo26n-obb.yaml", "classify": "yolo26n-cls.yaml", "semantic": "yolo26n-sem.yaml",
          "depth": "yolo26n-depth.yaml"}


# semantic and depth train their YOLO26 models in every test above (EXAMPLE_MODELS) and plan from `yolo train`
# words in test_train_args: here the five tasks whose examples build YOLO11
@pytest.mark.parametrize("task", [t for t in YOLO26 if EXAMPLE_MODELS[t] != YOLO26[t]])
def test_yolo26_trains_every_task_from_yolo_train_words(task, tmp_path):
    """8.4's default family (TASK2MODEL names yolo26n*.pt): the task's yolo26n yaml builds and trains one
    epoch through `yolo-orch train` words, the task read from the model. Detect trains with MuSGD (what
    optimizer=auto picks above 10,000 iterations) and keeps its one-to-one (NMS-free) head in best.pt;
    the others with optimizer=auto, whose pick the plan pins and explains."""
    import torch

    from orchestrator.data.synth import generate_dataset

    data = generate_dataset(tmp_path / "data", images=8, val_images=4, classes=2, imgsz=32, seed=0, task=task)
    optimizer = "MuSGD" if task == "detect" else "auto"
    r = run_cli("train", f"model={YOLO26[task]}", f"data={data}", "imgsz=32", "epochs=1", "batch=4", "workers=0",
                "plots=False", "device=cpu", f"optimizer={optimizer}", "--json", cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["state"] == "finished" and out["summary"]["epochs_completed"] == 1
    assert HEADLINE[task][-1][1] in out["summary"]["metrics"]
    run_dir = Path(out["run_dir"])
    resolved = yaml.safe_load((run_dir / "job.resolved.yaml").read_text())
    assert resolved["job"]["task"] == task
    # auto: the plan pins what Ultralytics would pick (AdamW with its fitted lr below 10,000 iterations), and says so
    assert resolved["plan"]["train_args"]["optimizer"] == {"auto": "AdamW"}.get(optimizer, optimizer)
    assert (optimizer == "auto") == any("reference optimizer=auto" in w for w in resolved["plan"]["warnings"])
    if task == "detect":
        model = torch.load(run_dir / "weights" / "best.pt", map_location="cpu", weights_only=False)["model"]
        # the one-to-one (NMS-free) branch trained beside the one-to-many one; `end2end` itself only selects
        # which one infers (8.4.190's validator sets it from `nms`)
        assert getattr(model.model[-1], "one2one_cv2", None) is not None, "YOLO26's one-to-one head"
        assert any("MuSGD" in line for line in (run_dir / "train.log").read_text().splitlines())


@pytest.mark.parametrize("task", ("semantic", "depth"))
def test_doctor_verify_plan_matches_the_trainer_for_the_per_pixel_tasks(task, tmp_path):
    """The installed trainer applies what the plan says for semantic and depth too (batch, nbs, accumulate,
    weight decay, warmup, lr; optimizer=auto's pick reported as a warning, not a failure)."""
    r = run_cli("doctor", "--verify-plan", task_job(tmp_path, task), "--json", cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    checks = json.loads(r.stdout)["checks"]
    assert checks and not [c for c in checks if c["status"] == "fail"], checks
