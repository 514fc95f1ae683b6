"""`yolo-orch sweep SWEEP.yaml --dry-run`: validates, shows the search space as the trials'
devices get it (through the scaler), and opens no storage, writes nothing, trains nothing."""

from __future__ import annotations

import json
import sys

import yaml

from conftest import TINY_JOB, cli_env, run_cli, write_job

# A base job tuned on 1 device at batch 16 (nbs 64: 64 images per optimizer step), run on 8
# devices at batch 256: 4x the images per step, so auto scaling multiplies SGD's lr0 by 4 and
# lengthens warmup to at least 5 epochs (docs/scaling.md).
JOB_8 = dict(TINY_JOB, name="wide", hyp={"optimizer": "SGD", "lr0": 0.01},
             reference={"devices": 1, "batch": 16, "nbs": 64}, target={"devices": 8, "batch": 256})
SPACE = {"hyp": {"lr0": {"low": 1.0e-3, "high": 2.0e-2, "log": True}, "warmup_epochs": {"low": 0.0, "high": 5.0},
                 "mosaic": {"low": 0.0, "high": 1.0}},
         "overrides": {"multi_scale": {"choices": [False, True]}}}


def write_sweep(folder, job: dict, **changes) -> None:
    write_job(folder, job)
    (folder / "sweep.yaml").write_text(yaml.safe_dump(
        {"study": "preview", "base": "job.yaml", "space": SPACE, "budget": {"n_trials": 7, "epochs": 30},
         "enqueue": [{"hyp": {"lr0": 0.01}}], **changes}, sort_keys=False))


def test_dry_run_shows_the_space_as_the_target_gets_it_and_writes_nothing(tmp_path):
    write_sweep(tmp_path, JOB_8)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = run_cli("sweep", "sweep.yaml", "--dry-run", "--json", cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["dry_run"] is True and out["study"] == "preview"
    assert out["storage_state"] == "new file" and out["storage"].endswith("runs/sweeps/preview.db")
    assert (out["n_trials"], out["epoch_budget"], out["workers"]) == (7, 30, 1)
    assert out["sampler"] == {"name": "tpe"} and out["pruner"] == {"name": "median", "n_warmup_steps": 0}
    assert out["base"]["devices"] == "8" and out["base"]["launcher"] == "torchrun"
    space = {p["name"]: p for p in out["space"]}
    # sampled at reference scale; on 8 devices the images per step grow x 4 and auto's rule for SGD from
    # scratch, linear, keeps lr0 (the summed loss gives the x 4)
    assert space["hyp.lr0"]["sampled"] == [0.001, 0.02]
    assert space["hyp.lr0"]["passed"] == [0.001, 0.02]
    # warmup is lengthened to 5 epochs at both ends: a dimension the target makes inert, and said so
    assert space["hyp.warmup_epochs"]["passed"] == [5.0, 5.0]
    assert any(w.startswith("hyp.warmup_epochs: the scaler passes 5.0 at both ends") for w in out["warnings"])
    # not scaled: passed as sampled, overrides included
    assert space["hyp.mosaic"]["passed"] == space["hyp.mosaic"]["sampled"] == [0.0, 1.0]
    assert space["overrides.multi_scale"]["passed"] == [False, True]
    assert out["enqueue"] == [{"hyp.lr0": 0.01}]
    assert sorted(p.name for p in tmp_path.rglob("*")) == before, "a dry run must write nothing"


def test_dry_run_table_on_the_reference_hardware(tmp_path):
    """On the hardware the hyperparameters were tuned on, nothing changes: 'as sampled'."""
    write_sweep(tmp_path, dict(TINY_JOB, hyp={"optimizer": "SGD", "lr0": 0.01}))
    result = run_cli("sweep", "sweep.yaml", "--dry-run", cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Sweep preview (dry run)" in result.stdout
    lr0_row = next(line for line in result.stdout.splitlines() if "hyp.lr0" in line)
    assert "float 0.001..0.02 log" in lr0_row and lr0_row.count("as sampled") == 2
    assert "dry run: no storage opened, nothing written" in result.stdout
    assert not (tmp_path / "runs").exists()


def test_dry_run_of_a_resumable_study_says_so(tmp_path):
    write_sweep(tmp_path, TINY_JOB | {"hyp": {"optimizer": "SGD", "lr0": 0.01}})
    db = tmp_path / "runs" / "sweeps" / "preview.db"
    db.parent.mkdir(parents=True)
    db.write_bytes(b"")
    result = run_cli("sweep", "sweep.yaml", "--dry-run", "--json", cwd=tmp_path, timeout=120)
    assert json.loads(result.stdout)["storage_state"] == "exists: the sweep resumes its study"
    assert db.read_bytes() == b""


def test_dry_run_still_refuses_bad_input(tmp_path):
    write_sweep(tmp_path, TINY_JOB | {"hyp": {"optimizer": "SGD", "lr0": 0.01}})
    result = run_cli("sweep", "sweep.yaml", "--dry-run", "--study", "a/b", cwd=tmp_path, timeout=120)
    assert result.returncode == 2 and "--study: 'a/b' is not a valid study name" in result.stderr
    assert "Traceback" not in result.stderr


def test_dry_run_imports_no_torch_ultralytics_or_optuna(tmp_path):
    import subprocess

    write_sweep(tmp_path, JOB_8, sampler={"name": "tpe", "startup": "local"})
    probe = ("import sys\nfrom typer.testing import CliRunner\nfrom orchestrator.cli.app import app\n"
             "r = CliRunner().invoke(app, ['sweep', 'sweep.yaml', '--dry-run', '--json'])\n"
             "assert r.exit_code == 0, r.output\n"
             "print('HEAVY', sorted(m for m in sys.modules if m.split('.')[0] in "
             "('torch', 'ultralytics', 'torchvision', 'cv2', 'wandb', 'optuna')))\n")
    result = subprocess.run([sys.executable, "-c", probe], env=cli_env(), capture_output=True, text=True,
                            cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stdout, result.stdout


def test_dry_run_shows_where_local_startup_draws(tmp_path):
    write_sweep(tmp_path, JOB_8, sampler={"name": "tpe", "startup": "local", "startup_scale": 0.03},
                enqueue=[{"hyp": {"lr0": 0.005}}])
    summary = json.loads(run_cli("sweep", "sweep.yaml", "--dry-run", "--json", cwd=tmp_path).stdout)
    # lr0 from the enqueued point; the rest from the base job, which leaves them at Ultralytics'
    # defaults (warmup_epochs 3.0, mosaic 1.0, multi_scale False)
    assert summary["startup_start"] == {"hyp.lr0": 0.005, "hyp.warmup_epochs": 3.0, "hyp.mosaic": 1.0,
                                        "overrides.multi_scale": False}
    assert summary["startup_scale"] == 0.03
    table = run_cli("sweep", "sweep.yaml", "--dry-run", cwd=tmp_path, env={"COLUMNS": "200"}).stdout
    assert "startup draws near" in table and "(steps of 0.03 x each range)" in table


def test_a_real_sweep_warns_of_an_inert_dimension_before_it_starts(tmp_path):
    """The same note on a real run, before any storage or compute: the `table` policy on 2 CPU
    processes (k = 2 devices) lengthens warmup to 5 epochs, so warmup_epochs 0..5 is inert.
    The storage is unreachable on purpose: the run ends right after the warning (exit 1)."""
    write_sweep(tmp_path, dict(TINY_JOB, hyp={"optimizer": "SGD", "lr0": 0.01}, target={"devices": "cpu:2"},
                               scaling={"policy": "table"}))
    result = run_cli("sweep", "sweep.yaml", "--storage", "postgresql://nobody@127.0.0.1:9/none", cwd=tmp_path,
                     timeout=120)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "warning: hyp.warmup_epochs: the scaler passes 5.0 at both ends of 0.0..5.0" in result.stdout
    assert result.stdout.count("warning:") == 1  # lr0 is scaled (x2), not inert: only warmup is named


def test_median_pruner_waits_half_the_epochs_unless_told(tmp_path):
    """Models trained from scratch all score ~0 in their first epochs: the median pruner's
    default warmup is half the base job's epochs, an explicit value wins."""
    from orchestrator.sweep.loader import load_sweep

    write_sweep(tmp_path, dict(TINY_JOB, epochs=35, hyp={"optimizer": "SGD", "lr0": 0.01}))
    assert load_sweep(tmp_path / "sweep.yaml").spec.pruner.n_warmup_steps == 17
    data = yaml.safe_load((tmp_path / "sweep.yaml").read_text())
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({**data, "pruner": {"name": "median", "n_warmup_steps": 3}}))
    assert load_sweep(tmp_path / "sweep.yaml").spec.pruner.n_warmup_steps == 3
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({**data, "pruner": {"name": "threshold", "upper": 5.0}}))
    assert load_sweep(tmp_path / "sweep.yaml").spec.pruner.n_warmup_steps is None  # thresholds are absolute


def test_lr0_searched_with_a_sampled_optimizer_is_not_called_inert(tmp_path):
    """Base job on optimizer=auto, the space samples the optimizer: every trial pins one, so lr0 reaches
    Ultralytics and the dry run must show its range, not warn that searching it changes nothing."""
    job = dict(TINY_JOB, hyp={"preset": "scratch-default", "optimizer": "auto"})
    space = {"hyp": {"optimizer": {"choices": ["SGD", "AdamW"]}, "lr0": {"low": 1.0e-4, "high": 1.0e-2, "log": True}}}
    write_sweep(tmp_path, job, space=space, enqueue=[])
    result = run_cli("sweep", "sweep.yaml", "--dry-run", "--json", cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    lr0 = next(p for p in out["space"] if p["name"] == "hyp.lr0")
    assert lr0["passed"] == [1.0e-4, 1.0e-2]
    assert not any("changes nothing" in w for w in out["warnings"]), out["warnings"]
