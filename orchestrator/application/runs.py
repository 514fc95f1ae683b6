"""What `runs`, `show` and `logs` read, without a terminal: the registry's rows and one run seen through
the run directory's read model (rundir/reading.py, which the dashboard reads too). Reads never write: a
missing registry is refused, never created."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import UserError
from orchestrator.registry import DB_NAME, STATES, Registry, Run, RunState, registry_path
from orchestrator.rundir import LOG, resolved_or_none
from orchestrator.rundir import reading


@dataclass
class RunList:
    """`runs`: the rows (newest first), the registry they came from, and other runs folders beside it
    (said when this one holds none)."""

    rows: list[Run]
    path: Path
    others: list[str] = field(default_factory=list)


def existing_registry(runs_dir, registry=None) -> Registry:
    """The registry of `runs_dir` (or the file `registry`): read commands never create one (nor the runs folder)."""
    path = registry_path(registry if registry is not None else runs_dir)
    if not path.is_file():
        raise UserError(f"RUN: no registry at {path}: no runs there yet (give --runs-dir or --registry, "
                        "or set YOLO_ORCH_REGISTRY)")
    return Registry.open(path)


def other_registries(path: Path, limit: int = 5) -> list[str]:
    """Runs folders in the current folder (one level down) with a registry other than `path`'s."""
    found = []
    try:
        folders = sorted(p for p in Path.cwd().iterdir() if p.is_dir())[:200]
    except OSError:
        return []
    for folder in folders:
        if (folder / DB_NAME).is_file() and (folder / DB_NAME).resolve() != path:
            found.append(str(folder.relative_to(Path.cwd())))
    return found[:limit]


def list_runs(runs_dir, registry=None, state: str | None = None, study: str | None = None, job: str | None = None,
              limit: int = 50) -> RunList:
    """The registry's runs and trials, filtered; none (and the folders beside it) where it has none yet."""
    if state is not None and state not in STATES:
        raise UserError(f"--state: unknown state '{state}'; expected one of {', '.join(STATES)}")
    path = registry_path(registry if registry is not None else runs_dir)
    rows = []
    if path.is_file():
        with existing_registry(runs_dir, registry) as reg:
            rows = reg.list(state=state, study=study, job=job, limit=limit)
    others = [] if rows or state or job or study else other_registries(path)
    return RunList(rows, path, others)


def find_run(runs_dir, registry, ref: str) -> Run:
    """The registry row of run id `ref` (or a unique prefix of one, or JOB/ID-PREFIX); a RegistryError names
    the choices."""
    with existing_registry(runs_dir, registry) as reg:
        return reg.resolve(ref)


def plan_facts(run_dir: Path) -> tuple[dict | None, dict | None]:
    """(the plan's batch facts, the recoveries) from the run's contract; (None, None) when it is unreadable."""
    resolved = resolved_or_none(run_dir)
    if resolved is None:
        return None, None
    plan = resolved.plan
    facts = {"devices": plan.devices, "launcher": plan.launcher, "policy": plan.policy,
             "batch": plan.train_args.get("batch"), "nbs": plan.train_args.get("nbs"),
             "batch_per_device": plan.effective.get("batch_per_device"), "accumulate": plan.accumulate,
             "images_per_step": plan.images_per_step, "epochs": plan.train_args.get("epochs"),
             "job_file": resolved.job_file}
    recoveries = {"oom": [s.to_dict() for s in resolved.oom_history],
                  "resumes": [r.to_dict() for r in resolved.resumes]}
    return facts, recoveries


def show_run(row: Run) -> dict:
    """`show`: the registry row, the summary, the plan's facts, the recoveries, the last epoch, the files."""
    run_dir = Path(row.run_dir or "")
    plan, recoveries = plan_facts(run_dir)
    return {"run": row.as_dict(), "summary": reading.summary_or_none(run_dir), "plan": plan, "recoveries": recoveries,
            "last_epoch": reading.last_epoch(run_dir), "files": reading.named_files(run_dir)}


def log_of(row: Run, follow: bool) -> Path:
    """`logs`: the run's train.log; refused while there is none, unless following a run still starting."""
    log = Path(row.run_dir or "") / LOG
    if not log.is_file() and not (follow and row.active):
        raise UserError(f"RUN: {row.id} has no log yet ({log})")
    return log


def export_run(row: Run, formats: list[str], say=None) -> dict[str, dict]:
    """`export`: a finished run's best.pt to each format (orchestrator/exports.py), refused in one line per
    problem before anything runs: an unknown format, its packages missing, a run not finished or without best.pt."""
    from orchestrator.exports import run_exports
    from orchestrator.rundir import BEST
    from orchestrator.rundir.tracking import EXPORT_FORMATS
    from orchestrator.runner import child_env
    from orchestrator.tracking import export_problems

    unknown = [f for f in formats if f not in EXPORT_FORMATS]
    problems = [f"--format: {f!r} is not one of {', '.join(EXPORT_FORMATS)}" for f in unknown]
    problems += export_problems([f for f in formats if f not in unknown], field="--format")
    run_dir = Path(row.run_dir or "")
    if row.state != RunState.FINISHED:
        problems.append(f"RUN: {row.id} is {row.state}; only a finished run is exported")
    elif not (run_dir / BEST).is_file():
        problems.append(f"RUN: {row.id} has no {BEST}")
    if problems:
        raise UserError(problems)
    return run_exports(run_dir, list(dict.fromkeys(formats)), env=child_env(), say=say or (lambda line: None))
