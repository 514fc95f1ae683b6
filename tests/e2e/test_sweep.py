"""`yolo-orch sweep` for real: tiny 2-epoch trials on CPU, SQLite storage, a pruner that
prunes deterministically, best.yaml that plans as a job's `hyp:`, resume to more trials,
W&B offline runs grouped by study, the study in MLflow, and bad sweep files that exit 2 naming the field."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import TINY_JOB, cli_env, processes_mentioning, run_cli, space, write_job, write_sweep
from orchestrator.harness.processes import command_line, descendants_running

def sweep_json(result) -> dict:
    assert result.returncode == 0, (result.returncode, result.stdout[-2000:], result.stderr[-4000:])
    return json.loads(result.stdout)


def trials_by_state(summary: dict, state: str) -> list[dict]:
    return [t for t in summary["trials"] if t["state"] == state]


def mlflow_nests_the_study(runs_dir: Path, summary: dict) -> None:
    """The runs folder's MLflow store: one experiment named after the study (not one per trial), one parent
    run (kept when the study was resumed) finished with the best trial, and each trial's run nested under
    it, tagged with the trial's Optuna state; a pruned trial's run holds its one epoch."""
    from orchestrator.harness.tracking import metric_steps, mlflow_runs

    uri = f"sqlite:///{runs_dir.resolve() / 'mlflow.db'}"
    runs = mlflow_runs(uri, summary["study"])
    parents = [run for run in runs if "mlflow.parentRunId" not in run.data.tags]
    assert [(p.info.run_name, p.info.status) for p in parents] == [(summary["study"], "FINISHED")]
    parent = parents[0]
    children = sorted((run for run in runs if run.data.tags.get("mlflow.parentRunId") == parent.info.run_id),
                      key=lambda run: int(run.data.tags["optuna.trial"]))
    assert [(c.data.tags["optuna.trial"], c.data.tags["optuna.state"]) for c in children] == \
        [(str(t["number"]), t["state"]) for t in summary["trials"]]
    for child, trial in zip(children, summary["trials"]):
        assert metric_steps(uri, child.info.run_id, "val/box_loss") == list(range(1, trial["epochs"] + 1))
    assert parent.data.tags["best.trial"] == str(summary["best"]["number"])
    assert parent.data.metrics["best_value"] == pytest.approx(summary["best"]["value"])


@pytest.mark.slow
def test_sweep_prunes_writes_best_and_resumes(tmp_path):
    # with MLflow on (`mlflow: {}`): the study is one parent run with a nested run per trial (checked last)
    sweep = write_sweep(tmp_path, job_changes={"mlflow": {}})
    first = sweep_json(run_cli("sweep", sweep, "--json", cwd=tmp_path, timeout=900))

    assert first["study"] == "tiny-sweep" and first["n_trials"] == 4
    assert first["done"] == 4 and first["reached"]
    assert first["states"]["COMPLETE"] + first["states"]["PRUNED"] == 4
    assert first["states"]["FAIL"] == 0 and first["states"]["RUNNING"] == 0
    db = (tmp_path / "runs" / "sweeps" / "tiny-sweep.db").resolve()
    assert first["storage"] == f"sqlite:///{db}"
    assert [t["number"] for t in first["trials"]] == [0, 1, 2, 3]

    # trial 1 (box 50) was pruned at its first epoch, with its last reported value
    pruned = trials_by_state(first, "PRUNED")
    assert pruned, first["trials"]
    t1 = first["trials"][1]
    assert t1["params"]["hyp.box"] == 50.0 and t1["state"] == "PRUNED", t1
    assert t1["epochs"] == 1 and t1["values"][0] > 10.0
    for t in pruned:
        assert t["params"]["hyp.box"] == 50.0
    for t in trials_by_state(first, "COMPLETE"):
        assert t["params"]["hyp.box"] == 0.5 and t["epochs"] == 2 and t["values"][0] < 10.0

    # the pruned trial stopped cleanly after 1 of 2 epochs: a normal run, registry row `pruned`
    run_dir = Path(t1["run_dir"])
    assert run_dir.parent.name == "tiny-sweep-trial1" and run_dir.parent.parent == (tmp_path / "runs").resolve()
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1]
    assert json.loads((run_dir / "summary.json").read_text())["epochs_completed"] == 1
    trial_json = json.loads((run_dir / "trial.json").read_text())
    assert trial_json["state"] == "pruned" and trial_json["step"] == 1
    resolved = yaml.safe_load((run_dir / "job.resolved.yaml").read_text())
    assert resolved["sweep"]["study"] == "tiny-sweep" and resolved["sweep"]["trial"] == 1
    assert resolved["plan"]["hyp"]["box"] == 50.0  # reference scale, through the plan (scaler)
    assert "storage" not in json.dumps(resolved["sweep"]), "the storage URL travels in the environment only"
    registry = tmp_path / "runs" / "registry.db"
    if registry.exists():
        rows = dict(sqlite3.connect(registry).execute("SELECT trial, state FROM runs WHERE study = 'tiny-sweep'"))
        assert rows[1] == "pruned", rows
        assert {rows[t["number"]] for t in trials_by_state(first, "COMPLETE")} == {"finished"}

    # results: best.yaml (flat preset at reference scale), plots, dashboard command
    best = first["best"]
    assert best["params"]["hyp.box"] == 0.5
    study_dir = (tmp_path / "runs" / "sweeps" / "tiny-sweep").resolve()
    best_yaml = study_dir / "best.yaml"
    assert first["best_yaml"] == str(best_yaml)
    preset = yaml.safe_load(best_yaml.read_text())
    assert preset["box"] == 0.5 and preset["lr0"] == pytest.approx(best["params"]["hyp.lr0"])
    assert preset["optimizer"] == "AdamW"  # from the base job, not sampled
    assert all(not isinstance(v, dict) for v in preset.values()), "hyp values flat"
    for name in ("history.html", "intermediate.html", "importances.html"):
        assert (study_dir / name).is_file(), first.get("notes")
    assert (study_dir / "plotly.min.js").is_file(), "plots work offline"
    assert first["dashboard"] == f"optuna-dashboard 'sqlite:///{db}'"
    assert json.loads((study_dir / "summary.json").read_text())["done"] == 4

    # a job using `hyp: best.yaml` plans, with the winner's values
    job = write_job(tmp_path, filename="winner.yaml", name="winner",
                    hyp="runs/sweeps/tiny-sweep/best.yaml")
    plan = run_cli("submit", job, "--dry-run", "--json", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    args = json.loads(plan.stdout)["train_args"]
    assert args["box"] == 0.5 and args["lr0"] == pytest.approx(preset["lr0"]) and args["optimizer"] == "AdamW"

    # re-running resumes the same study: 5 trials in total, the first 4 untouched (one more trial shows the
    # resume as two did; the second cost about 9 s)
    second = sweep_json(run_cli("sweep", sweep, "--n-trials", "5", "--json", cwd=tmp_path, timeout=900))
    assert second["done"] == 5 and second["n_trials"] == 5
    assert [t["number"] for t in second["trials"]] == list(range(5))
    assert [(t["state"], t["values"]) for t in second["trials"][:4]] == \
        [(t["state"], t["values"]) for t in first["trials"]]
    mlflow_nests_the_study(tmp_path / "runs", second)

    # with the budget reached, the command only reports; the orchestrator process imports no torch
    probe = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from orchestrator.cli.app import app\n"
        "r = CliRunner().invoke(app, ['sweep', sys.argv[1], '--n-trials', '5'])\n"
        "assert r.exit_code == 0, r.output\n"
        "assert 'Sweep tiny-sweep: 5/5 trials done' in r.output, r.output\n"
        "assert 'optuna-dashboard' in r.output\n"
        "print('HEAVY', sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'ultralytics', 'cv2')))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe, str(sweep)], env=cli_env(), capture_output=True,
                            text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "HEAVY []" in result.stdout


@pytest.mark.slow
def test_epoch_budget_stops_the_study(tmp_path):
    # trial 0 (box 0.5) trains 2 epochs: 2 of 3 spent, a trial starts; trial 1 (box 50) is pruned
    # after its first epoch: 3 spent, no new trial although n_trials is 50
    sweep = write_sweep(tmp_path, study="budget-sweep", budget={"n_trials": 50, "epochs": 3})
    first = sweep_json(run_cli("sweep", sweep, "--json", cwd=tmp_path, timeout=900))
    assert [(t["number"], t["state"], t["epochs"]) for t in first["trials"]] == [(0, "COMPLETE", 2), (1, "PRUNED", 1)]
    assert first["epochs_spent"] == 3 and first["epoch_budget"] == 3 and first["reached"]
    assert first["done"] == 2 and first["n_trials"] == 50

    # the flag overrides the file and resumes the study; a trial in flight finishes, so the study
    # ends within one trial's epochs (2) past the budget
    second = sweep_json(run_cli("sweep", sweep, "--epoch-budget", "5", "--json", cwd=tmp_path, timeout=900))
    assert second["epoch_budget"] == 5 and second["reached"]
    assert 5 <= second["epochs_spent"] < 5 + 2
    assert second["epochs_spent"] == sum(t["epochs"] for t in second["trials"])
    assert [(t["state"], t["values"]) for t in second["trials"][:2]] == [(t["state"], t["values"]) for t in first["trials"]]


@pytest.mark.slow
def test_a_trial_is_never_pruned_at_its_last_epoch(tmp_path):
    # box 50 crosses the threshold at epoch 1, which is also the last: the epoch is paid for,
    # so the trial completes with its model instead of being thrown away
    sweep = write_sweep(tmp_path, study="last-epoch", budget={"n_trials": 1}, job_changes={"epochs": 1},
                        enqueue=[{"hyp": {"box": 50.0, "lr0": 0.002}}])
    summary = sweep_json(run_cli("sweep", sweep, "--json", cwd=tmp_path, timeout=600))
    (trial,) = summary["trials"]
    assert trial["state"] == "COMPLETE" and trial["epochs"] == 1 and trial["values"][0] > 10.0, trial
    assert (Path(trial["run_dir"]) / "weights" / "best.pt").is_file()


@pytest.mark.slow
def test_trial_is_a_wandb_run_grouped_by_study(tmp_path):
    from wandb_records import read_run

    sweep = write_sweep(tmp_path, study="wb-sweep", enqueue=[{"hyp": {"box": 0.5, "lr0": 0.002}}],
                        budget={"n_trials": 1}, job_changes={"epochs": 1, "wandb": {"project": "orch-sweep"}})
    summary = sweep_json(run_cli("sweep", sweep, "--json", cwd=tmp_path, env={"WANDB_API_KEY": ""}, timeout=600))
    trial = summary["trials"][0]
    assert trial["state"] == "COMPLETE"
    files = list(Path(trial["run_dir"]).glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1
    run = read_run(files[0])
    assert run["run"].run_group == "wb-sweep" and run["run"].project == "orch-sweep"
    assert run["config"]["sweep"]["params"] == {"hyp.box": 0.5, "hyp.lr0": 0.002}
    assert run["config"]["sweep"]["trial"] == 0
    assert run["summary"]["sweep/state"] == "complete"
    assert run["summary"]["sweep/objective"] == pytest.approx(trial["values"][0], rel=1e-5)


@pytest.mark.parametrize(
    "changes,expected",
    [
        ({"space": space(lr0={"low": 0.01, "high": 0.01})}, "space.hyp.lr0: empty range"),
        ({"space": space(lr0={"low": 0.1, "high": 0.01})}, "space.hyp.lr0: inverted range: low (0.1) > high (0.01)"),
        ({"space": space(close_mosaic={"low": 5, "high": 2})}, "space.hyp.close_mosaic: inverted range"),
        ({"space": space(lr_zero={"low": 0.001, "high": 0.01})}, "space.hyp.lr_zero: unknown key"),
        ({"colour": "red"}, "colour: unknown key"),
        ({"space": space(lr0={"low": 0.001, "high": 0.01, "scale": "log"})}, "space.hyp.lr0.scale: unknown key"),
        ({"sampler": "bayes"}, "sampler.name: must be 'tpe', 'cmaes', 'gp', 'random', 'grid' or 'nsga2' (got 'bayes')"),
        ({"pruner": "sometimes"}, "pruner.name: must be"),
        ({"objective": "mAP99"}, "objective.metric: unknown metric 'mAP99'"),
        ({"space": {}}, "space: empty search space"),
        ({"space": space(lr0={"low": 0.001, "high": 20.0})}, "space.hyp.lr0.high: must be less than or equal to 10"),
        ({"space": space(optimizer={"choices": ["SGD", "Adagrad"]})}, "space.hyp.optimizer.choices[1]:"),
        ({"space": {"overrides": {"workres": {"low": 0, "high": 2}}}},
         "space.overrides.workres: not an Ultralytics train argument; did you mean 'workers'?"),
        ({"space": {"overrides": {"lr0": {"low": 0.001, "high": 0.01}}}}, "space.overrides.lr0: a hyperparameter"),
        ({"space": space(lr0={"low": -1.0, "high": 0.01, "log": True})}, "space.hyp.lr0: log scale needs low > 0"),
        ({"sampler": "grid"}, "space.hyp.lr0: the grid sampler needs finite values"),
        ({"objective": ["fitness", "val/box_loss"], "pruner": "median"}, "pruner: Optuna prunes single-objective"),
        ({"sampler": {"name": "random", "multivariate": True}}, "sampler: multivariate: not an option"),
        ({"pruner": {"name": "threshold"}}, "pruner: the threshold pruner needs"),
        ({"budget": {"n_trials": 0}}, "budget.n_trials: must be greater than or equal to 1 (got 0)"),
        ({"budget": {"epochs": 0}}, "budget.epochs: must be greater than or equal to 1 (got 0)"),
        ({"base": "missing.yaml"}, "base: "),
        ({"base": {"name": "x", "data": {"synth": {}}, "epochs": -1}}, "base.epochs: must be greater than or equal"),
        ({"enqueue": [{"hyp": {"lr0": 5.0}}]}, "enqueue[0].hyp.lr0: 5.0 is outside space.hyp.lr0"),
        ({"study": "../etc"}, "study:"),
    ],
)
def test_bad_sweep_specs_exit_2_naming_the_field(tmp_path, changes, expected):
    sweep = write_sweep(tmp_path, **{"space": space(lr0={"low": 1e-3, "high": 1e-2}), "enqueue": [], **changes})
    result = run_cli("sweep", sweep, cwd=tmp_path)
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    assert expected in result.stderr, (expected, result.stderr)
    assert not (tmp_path / "runs").exists(), "a bad sweep must not write anything"


def test_sampling_lr0_under_optimizer_auto_is_refused(tmp_path):
    job = dict(TINY_JOB, hyp={})  # no preset, no optimizer: Ultralytics' default `auto`, which ignores lr0
    write_job(tmp_path, job)
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({"base": "job.yaml", "budget": {"n_trials": 1}, "space": space(
        lr0={"low": 1e-3, "high": 1e-2}, momentum={"low": 0.8, "high": 0.95})}))
    result = run_cli("sweep", tmp_path / "sweep.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert "space.hyp.lr0: the base job's optimizer is 'auto', which ignores lr0" in result.stderr
    assert "space.hyp.momentum:" in result.stderr


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--n-trials", "0"], "--n-trials: must be at least 1"),
        (["--timeout", "-5"], "--timeout: must be a positive number"),
        (["--epoch-budget", "0"], "--epoch-budget: must be at least 1"),
        (["--workers", "0"], "--workers: must be between 1 and 256"),
        (["--storage", "not a url"], "--storage: 'not a url' is not a SQLAlchemy URL"),
        (["--storage", "sqlite://"], "--storage: an in-memory SQLite database cannot be shared"),
        (["--study", "a/b"], "--study: 'a/b' is not a valid study name"),
    ],
)
def test_bad_sweep_flags_exit_2(tmp_path, args, expected):
    sweep = write_sweep(tmp_path)
    result = run_cli("sweep", sweep, *args, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


def test_missing_and_empty_sweep_files(tmp_path):
    result = run_cli("sweep", tmp_path / "nope.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "nope.yaml: no such sweep file" in result.stderr
    (tmp_path / "empty.yaml").write_text("")
    result = run_cli("sweep", tmp_path / "empty.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "file is empty" in result.stderr


def test_example_sweep_is_valid():
    """examples/sweep.yaml loads, its base job plans, and its space is what the docs say."""
    from conftest import REPO
    from orchestrator.sweep.loader import load_sweep

    sweep = load_sweep(REPO / "examples" / "sweep.yaml")
    assert sweep.base.spec.name == "quickstart"
    assert {p.name for p in sweep.params} >= {"hyp.lr0", "hyp.mosaic"}
    assert sweep.spec.sampler.name == "tpe" and sweep.spec.pruner.name == "median"


@pytest.mark.parametrize("sampler", ["tpe", "cmaes", "gp", "random", "grid", "nsga2"])
def test_every_sampler_drives_a_study(tmp_path, sampler):
    """Each sampler name builds the Optuna sampler and samples the space (a synthetic objective:
    no training). cmaes needs `cmaes`, gp needs scipy + torch (requirements/base.txt)."""
    import optuna

    from orchestrator.sweep.objective import suggest
    from orchestrator.sweep.loader import load_sweep
    from orchestrator.sweep.study import make_pruner, make_sampler

    multi = sampler == "nsga2"
    sweep = write_sweep(tmp_path, sampler={"name": sampler, "seed": 1}, enqueue=[], space={"hyp": {
        "lr0": {"low": 1e-3, "high": 1e-2, "step": 1e-3} if sampler == "grid" else {"low": 1e-3, "high": 1e-2},
        "close_mosaic": {"low": 0, "high": 4},
        "optimizer": {"choices": ["SGD", "AdamW"]}}},
        objective=["fitness", "val/box_loss"] if multi else "fitness", pruner="none" if multi else "median")
    loaded = load_sweep(sweep)
    study = optuna.create_study(directions=loaded.spec.directions, pruner=make_pruner(loaded.spec.pruner),
                                sampler=make_sampler(loaded.spec.sampler, loaded.params))
    for _ in range(6):
        trial = study.ask()
        params = suggest(trial, loaded.params)
        assert 1e-3 <= params["hyp.lr0"] <= 1e-2 and params["hyp.optimizer"] in ("SGD", "AdamW")
        value = params["hyp.lr0"] * 10 + params["hyp.close_mosaic"]
        study.tell(trial, [value, -value] if multi else value)
    assert len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) == 6


@pytest.mark.parametrize("pruner", [{"name": "median"}, {"name": "hyperband", "min_resource": 1, "max_resource": 3},
                                    {"name": "threshold", "lower": 0.1}, {"name": "none"}])
def test_every_pruner_builds(pruner):
    from orchestrator.sweep.config import PrunerSpec
    from orchestrator.sweep.study import make_pruner

    assert make_pruner(PrunerSpec.model_validate(pruner)) is not None


def test_report_of_a_multi_objective_study(tmp_path, monkeypatch):
    """The report from a study's records alone (no training): Pareto front, best.yaml with the
    sampled overrides in a commented section, plots, summary.json."""
    import optuna

    from orchestrator.sweep import report
    from orchestrator.sweep.loader import load_sweep
    from orchestrator.sweep.study import check_url, default_storage, open_study, record_sweep

    monkeypatch.chdir(tmp_path)  # runs_dir "runs" is relative to the working directory, as for `submit`
    sweep = write_sweep(tmp_path, enqueue=[], objective=["fitness", "val/box_loss"], pruner="none",
                        sampler="nsga2", space={"hyp": {"lr0": {"low": 1e-3, "high": 1e-2}},
                                                "overrides": {"cache": {"choices": [False, "ram"]}}})
    loaded = load_sweep(sweep)
    url = check_url(default_storage(loaded))
    study = open_study(loaded, url)
    record_sweep(study, loaded)
    dists = {p.name: p.distribution() for p in loaded.params}
    for i, (lr, cache, values) in enumerate([(0.002, False, [0.30, 1.2]), (0.005, "ram", [0.35, 1.5]),
                                              (0.009, False, [0.10, 0.9]), (0.004, "ram", [0.20, 1.6])]):
        study.add_trial(optuna.trial.create_trial(params={"hyp.lr0": lr, "overrides.cache": cache},
                                                  distributions=dists, values=values, user_attrs={"epochs": 2}))
    summary = report.write_report(study, loaded, url, n_trials=4)
    assert summary["reached"] and summary["done"] == 4 and summary["epochs_spent"] == 8
    assert [t["number"] for t in summary["pareto_front"]] == [1, 0, 2]  # best fitness first; #3 is dominated
    assert summary["best"]["number"] == 1 and summary["best"]["overrides"] == {"cache": "ram"}
    text = Path(summary["best_yaml"]).read_text()
    preset = yaml.safe_load(text)
    assert preset["lr0"] == 0.005 and "cache" not in preset and "overrides" not in preset
    assert "# overrides:\n#   cache: ram\n" in text
    folder = tmp_path / "runs" / "sweeps" / "tiny-sweep"
    assert {"history.html", "pareto.html", "importances.html"} <= {p.name for p in folder.iterdir()}
    assert json.loads((folder / "summary.json").read_text())["pareto_front"][0]["number"] == 1
    from rich.console import Console

    console = Console(record=True, width=160)
    for part in report.render(summary):
        console.print(part)
    shown = console.export_text()
    assert "pareto front" in shown and "#1, #0, #2" in shown and "optuna-dashboard" in shown


@pytest.mark.slow
def test_kill9_of_the_sweep_command_ends_its_workers_and_the_trial_is_retried(tmp_path):
    """kill -9 of `yolo-orch sweep` alone (not its group): its worker and the running trial's training
    process end within seconds (no study finished unsupervised), the interrupted trial is queued again,
    and the next run trains it and writes the report."""
    import os
    import signal
    import time

    import optuna


    sweep = write_sweep(tmp_path, budget={"n_trials": 2}, enqueue=[{"hyp": {"box": 0.5, "lr0": 0.002}}],
                        pruner={"name": "none"}, job_changes={"mlflow": {}})
    env = cli_env({"YOLO_ORCH_FAULT_SLEEP": "epoch=2,seconds=300"})  # holds trial 0 in its second epoch
    cli = subprocess.Popen([sys.executable, "-m", "orchestrator", "sweep", str(sweep)], cwd=tmp_path, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while not any('"event": "epoch"' in p.read_text() for p in tmp_path.glob("runs/tiny-sweep-trial0/*/events.jsonl")):
        assert time.time() < deadline and cli.poll() is None, "trial 0 never finished its first epoch"
        time.sleep(0.2)
    run_dir = next(tmp_path.glob("runs/tiny-sweep-trial0/*"))
    workers = descendants_running(cli.pid, "orchestrator.sweep.trial_loop")  # this sweep's, not another test's
    assert workers and processes_mentioning(str(run_dir))
    os.kill(cli.pid, signal.SIGKILL)
    cli.wait(10)
    deadline = time.time() + 30
    while any(command_line(pid) for pid in workers) or processes_mentioning(str(run_dir)):
        assert time.time() < deadline, "the sweep worker or its trial outlived `yolo-orch sweep`"
        time.sleep(0.2)
    assert len(list(tmp_path.glob("runs/tiny-sweep-trial*/*"))) == 1  # no trial started after the kill

    db = f"sqlite:///{tmp_path / 'runs' / 'sweeps' / 'tiny-sweep.db'}"
    trials = optuna.load_study(study_name="tiny-sweep", storage=db).get_trials(deepcopy=False)
    assert [t.state.name for t in trials] == ["FAIL", "WAITING"]
    assert trials[1].system_attrs["failed_trial"] == 0 and trials[1].params == trials[0].params
    # its nested MLflow run is not left RUNNING without an outcome (issue 60)
    from orchestrator.harness.tracking import mlflow_client, mlflow_record

    uri, record = f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}", mlflow_record(run_dir)
    killed = mlflow_client(uri).get_run(record["run_id"])
    assert killed.info.status in ("KILLED", "FAILED") and killed.data.tags["optuna.state"] == "FAIL", killed

    summary = sweep_json(run_cli("sweep", sweep, "--json", cwd=tmp_path, timeout=900))
    assert summary["done"] == 2 and summary["states"]["FAIL"] == 1
    retried = next(t for t in summary["trials"] if t["number"] == 1)
    assert retried["state"] == "COMPLETE" and retried["params"] == {"hyp.box": 0.5, "hyp.lr0": 0.002}
    assert (tmp_path / "runs" / "sweeps" / "tiny-sweep" / "best.yaml").is_file()
