"""W&B logging from the training process (rank 0 only). Imports wandb lazily.

    python -m orchestrator.worker.wandb_logger RUN_DIR

brings a run's W&B run up to date without training: the epochs its attempts trained that W&B does not
hold (a run closed as finished after a kill, whose last attempt's W&B buffer was lost with it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from orchestrator.rundir import ResolvedRun
from orchestrator.worker import trackers
from orchestrator.worker.trackers import first_line

# wandb's own default is 90 s, spent before the first epoch on a node whose W&B server is slow
# or half-reachable; past this the run logs offline instead.
INIT_TIMEOUT_S = 20


class WandbLogger:
    name = "wandb"

    def __init__(self, run_dir: Path, resolved: ResolvedRun, mode: str, group: str | None = None):
        self.run_dir = Path(run_dir)
        self.on_warning = None  # (W&B's one warning is at its start)
        self.resolved = resolved
        self.mode = mode
        self.group = group
        self.run = None
        # A resumed run continues its W&B run (the same id: one run; `wandb sync` uploads each attempt's
        # folder in order). Its steps (epochs) only go forward: what earlier attempts durably wrote is
        # not logged again (an epoch trained again after a rewind keeps its first values there), and
        # what they trained but lost in W&B's buffer when killed is logged from events.jsonl (trackers.start).
        self.logged_through = 0

    def start(self) -> str | None:
        """Start the W&B run. Online W&B never costs a run: when the server cannot be reached or
        `wandb.init` fails (no network, a bad key, a timeout), log offline instead and return the
        warning that says so and how to upload later; None when nothing went wrong."""
        if self.mode == "disabled":
            return None
        from orchestrator.worker.wandb_history import last_logged_step

        self.logged_through = last_logged_step(self.run_dir / "wandb", self.wandb_id)
        os.environ["WANDB_DIR"] = str(self.run_dir)
        os.environ.setdefault("WANDB_SILENT", "true")
        warning = None
        if self.mode == "online":
            from orchestrator.worker.wandb_reach import unreachable_reason

            why = unreachable_reason()
            if why is None:
                try:
                    self.run = self._init("online")
                except Exception as exc:  # noqa: BLE001 - wandb raises CommError, AuthenticationError, UsageError...
                    why = f"wandb.init failed ({type(exc).__name__}: {first_line(exc)})"
                    _teardown()  # else the offline init below finds the half-started run's id "in use"
            if why is not None:
                self.mode = "offline"
                warning = (f"W&B online could not start: {why}; logging offline to {self.run_dir / 'wandb'} "
                           f"(upload later: wandb sync {self.run_dir / 'wandb'}/offline-run-*)")
        if self.run is None:
            try:
                self.run = self._init(self.mode)
            except Exception as exc:  # noqa: BLE001 - even offline W&B must not end the training
                self.mode = "disabled"
                warning = ((warning + "; then " if warning else "") + f"W&B could not start offline either "
                           f"({type(exc).__name__}: {first_line(exc)}): this run is not logged to W&B")
        return warning

    def _init(self, mode: str):
        os.environ["WANDB_MODE"] = mode
        import wandb

        cfg = self.resolved.job.wandb
        return wandb.init(
            project=cfg.get("project") or "yolo-orch",
            entity=cfg.get("entity"),
            group=self.group or cfg.get("group"),
            tags=cfg.get("tags") or None,
            name=self.resolved.run_id,
            id=self.wandb_id,
            dir=str(self.run_dir),
            mode=mode,
            config=self.config(),
            resume="allow",
            # no debug.log / debug-internal.log / latest-run links in the run directory: the run folder
            # holds no symbolic links, so a resume can refuse every link it finds (runner.refuse_symlinks)
            settings=wandb.Settings(init_timeout=INIT_TIMEOUT_S, symlink=False),
        )

    @property
    def wandb_id(self) -> str:
        return self.resolved.run_id.replace(".", "-")

    def started(self) -> bool:
        return self.run is not None

    def config(self) -> dict[str, Any]:
        plan, job = self.resolved.plan, self.resolved.job
        scaled = {key: {"reference": plan.hyp.get(key), "passed": value} for key, value in plan.passed.items()}
        return {
            "job": job.document,
            "reference": job.reference,
            "target": {"devices": plan.devices, "world_size": plan.world_size},
            "policy": plan.policy,
            "scaled": scaled,
            "effective": plan.effective,
            "reasons": plan.reasons,
            "train_args": plan.train_args,
        }

    def log_epoch(self, epoch: int, metrics: dict[str, Any]) -> None:
        if self.run is not None and epoch > self.logged_through:
            self.run.log({"epoch": epoch, **metrics}, step=epoch)
            self.logged_through = epoch

    def finish(self, final: dict[str, Any], exit_code: int = 0) -> None:
        if self.run is None:
            return
        for key, value in final.items():
            self.run.summary[f"final/{key}"] = value
        self.run.finish(exit_code=exit_code)
        self.run = None

    def record(self) -> None:  # the W&B run folder is the record: summary.json has none
        return None


def _teardown() -> None:
    try:
        import wandb

        wandb.teardown()
    except Exception:  # noqa: BLE001 - best effort: the offline retry reports its own failure
        pass


def start_for_run(run_dir: Path, resolved: ResolvedRun, warn=None) -> WandbLogger | None:
    """The run's W&B logger, started (trackers.start); None when the job disables W&B. `warn(message)` receives the
    one warning when online W&B fell back to offline (or could not start at all)."""
    if resolved.wandb_mode == "disabled":
        return None
    return trackers.start(WandbLogger(run_dir, resolved, resolved.wandb_mode), warn)
