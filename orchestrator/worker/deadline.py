"""Stop before a deadline (a Kaggle session's limit, a Slurm job's), at an epoch boundary, with a resumable
checkpoint.

`SessionDeadline` is an Ultralytics `on_fit_epoch_end` callback, attached when job.resolved.yaml
has a `deadline` (ResolvedRun.deadline) or the environment names one (ENV_DEADLINE: a Slurm job's). It runs after `save_model` wrote this epoch's last.pt. When
the NEXT epoch would end after the deadline it sets `trainer.stop = True`, copies the
just-written, still resumable last.pt to `weights/session_resume.pt` (the trainer's final
evaluation then strips last.pt of its optimizer, as Ultralytics does) and writes
`session_stop.json`, which makes the run's summary say `paused` (rundir.finish_run).

Torch-free (only the standard library).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from orchestrator.rundir import DEADLINE_STOP, ENV_DEADLINE, LAST, SESSION_RESUME, ResolvedRun, write_json_atomic


class SessionDeadline:
    def __init__(self, deadline: float, run_dir: str | Path, safety: float = 1.2, clock=time.time):
        self.deadline = float(deadline)
        self.run_dir = str(run_dir)
        self.safety = float(safety)
        self.clock = clock
        self.durations: list[float] = []
        self.last_mark: float | None = None
        self.done = False  # stopped here, or the natural last epoch passed: later calls are final_eval's

    def estimate(self) -> float:
        """Expected duration of the next epoch: the slowest of the last three, leaving out the first
        epoch (it includes XLA compilation) once there are others."""
        steady = self.durations[1:] or self.durations
        return max(steady[-3:]) if steady else 0.0

    def __call__(self, trainer) -> None:
        now = self.clock()
        if self.done:
            return
        epoch, total = int(trainer.epoch), int(trainer.epochs)
        duration = getattr(trainer, "epoch_time", None)
        if not duration:
            start = self.last_mark if self.last_mark is not None else getattr(trainer, "train_time_start", now)
            duration = now - start
        self.last_mark = now
        self.durations.append(float(duration))
        if epoch + 1 >= total or getattr(trainer, "stop", False):
            self.done = True  # the trainer ends here anyway
            return
        need = self.estimate() * self.safety
        if now + need <= self.deadline:
            return
        self.done = True
        trainer.stop = True
        run_dir = Path(self.run_dir)
        last = Path(getattr(trainer, "last", run_dir / LAST))
        kept = None
        if last.is_file():
            kept = run_dir / SESSION_RESUME
            tmp = kept.with_name(f".{kept.name}.tmp")
            shutil.copyfile(last, tmp)
            tmp.replace(kept)
        record = {
            "epoch": epoch + 1, "epochs": total, "time": now, "deadline": self.deadline,
            "next_epoch_estimate_s": round(need, 1), "seconds_left": round(self.deadline - now, 1),
            "checkpoint": str(SESSION_RESUME) if kept else None,
        }
        write_json_atomic(run_dir / DEADLINE_STOP, record)
        print(f"[yolo-orch] session limit: stopping after epoch {epoch + 1}/{total} "
              f"({record['seconds_left']:.0f} s left, next epoch needs ~{need:.0f} s); "
              "the next session resumes from here", flush=True)


def attach(model, run_dir: Path, resolved: ResolvedRun) -> None:
    """The deadline callback when the run has one (`model`: anything with Ultralytics' add_callback): its
    job.resolved.yaml's (a Kaggle session's), else ENV_DEADLINE's (a Slurm job's end, less its margin)."""
    (Path(run_dir) / DEADLINE_STOP).unlink(missing_ok=True)  # an earlier session's decision
    deadline = resolved.deadline or _env_deadline()
    if deadline:
        model.add_callback("on_fit_epoch_end", SessionDeadline(deadline, run_dir))


def _env_deadline() -> float | None:
    try:
        return float(os.environ.get(ENV_DEADLINE) or 0) or None
    except ValueError:  # not a number: no deadline (the job's limit still ends it, and the next job resumes)
        return None
