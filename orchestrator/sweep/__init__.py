"""Hyperparameter sweeps with Optuna: `yolo-orch sweep SWEEP.yaml`.

    spec.py            SweepSpec (Pydantic) and load_sweep(): the sweep file, its base job, the search space
    study.py           storage (SQLite by default, any SQLAlchemy URL), study, sampler and pruner factories
    local_startup.py   `sampler: {name: tpe, startup: local}`: TPE's startup trials drawn near the start
    objective.py       one trial: sample -> job -> plan (scaler) -> run (runner) -> value   [no torch]
    worker.py          a worker process: asks trials until the study has its n_trials     [no torch]
    trial_callback.py  inside the TRAINING process: trial.report / should_prune, trainer.stop
    report.py          summary table, best.yaml, plots, dashboard command, JSON
    preview.py         --dry-run: the space as the trials' devices get it; no storage, no writes [no optuna]
"""
