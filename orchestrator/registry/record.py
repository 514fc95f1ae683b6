"""A run as the registry records it: one typed, frozen record, its JSON columns decoded once (registry/query.py
makes them). Every read of the registry returns these; `as_dict` is its JSON form (`yolo-orch runs --json`,
`show --json`, the dashboard), the table's columns by name."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from orchestrator.registry.states import ACTIVE, RESUMABLE, RunState


@dataclass(frozen=True)
class Note:
    time: float
    text: str


@dataclass(frozen=True)
class Run:
    id: str
    job: str
    state: RunState
    created_at: float
    started_at: float | None = None
    ended_at: float | None = None
    updated_at: float | None = None
    devices: str | None = None
    run_dir: str | None = None  # as written (str): `folder` is its Path
    host: str | None = None
    pid: int | None = None  # the supervising orchestrator process, and its identity (boot id + start time)
    pid_start: str | None = None
    worker_pid: int | None = None  # the training process (group leader)
    worker_start: str | None = None
    exit_code: int | None = None
    attempts: int = 0  # how many times the training process was started
    epochs_done: int | None = None
    epochs: int | None = None
    metrics: dict[str, Any] | None = None  # final metrics, or the last epoch's
    study: str | None = None  # a sweep trial's study and number
    trial: int | None = None
    tags: dict[str, Any] | None = None  # every tag given at creation
    oom_retries: int = 0
    notes: tuple[Note, ...] = ()

    @classmethod
    def from_row(cls, row: dict) -> "Run":
        """A decoded row (query.decode): unknown columns ignored, a JSON column that is no JSON read as none."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in row.items() if k in known}
        values["state"] = RunState(row["state"])
        values["metrics"] = row.get("metrics") if isinstance(row.get("metrics"), dict) else None
        values["tags"] = row.get("tags") if isinstance(row.get("tags"), dict) else None
        values["notes"] = tuple(Note(float(n.get("time") or 0), str(n.get("text", ""))) for n in row.get("notes") or []
                                if isinstance(n, dict))
        for name in ("attempts", "oom_retries"):
            values[name] = int(values.get(name) or 0)
        return cls(**values)

    @property
    def folder(self) -> Path | None:
        return Path(self.run_dir) if self.run_dir else None

    @property
    def active(self) -> bool:
        """A process owns it (queued or running)."""
        return self.state in ACTIVE

    @property
    def resumable(self) -> bool:
        return self.state in RESUMABLE

    @property
    def label(self) -> str:
        """JOB/ID, as the commands name a run."""
        return f"{self.job}/{self.id}"

    def as_dict(self) -> dict[str, Any]:
        """The JSON form: every column by name, the state its word, notes as {"time", "text"}."""
        out = asdict(self)
        out["state"] = str(self.state)
        out["notes"] = [{"time": n.time, "text": n.text} for n in self.notes]
        return out
