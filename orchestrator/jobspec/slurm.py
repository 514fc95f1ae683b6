"""Slurm's own words, read as sbatch(1) reads them (a `--time`, a partition or account name, one raw
option), and the job's `slurm:` section: where a run placed on Slurm (`target.launcher: slurm`) asks
for its allocation. `yolo-orch slurm` (launch/slurm.py) checks its flags with the same readers."""

from __future__ import annotations

import re
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_TIME_FORMS = (  # Slurm's --time: the forms sbatch(1) lists, as (pattern, seconds per field)
    (r"(\d+)", (60,)), (r"(\d+):(\d+)", (60, 1)), (r"(\d+):(\d+):(\d+)", (3600, 60, 1)),
    (r"(\d+)-(\d+)", (86400, 3600)), (r"(\d+)-(\d+):(\d+)", (86400, 3600, 60)),
    (r"(\d+)-(\d+):(\d+):(\d+)", (86400, 3600, 60, 1)),
)
SLURM_NAME = re.compile(r"[A-Za-z0-9_.,+@-]{1,128}")  # partitions (a comma list), accounts
RAW_OPTION = re.compile(r"--?[A-Za-z][A-Za-z0-9-]*(=[^\x00-\x1f\x7f]*)?")  # one option, no line breaks
TIME_WORDS = "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS, or UNLIMITED"
NAME_WORDS = "letters, digits, '_', '.', '-'; a comma between partitions"


def time_limit_seconds(text: str) -> int | None:
    """Seconds in a Slurm --time value (None: no limit: 0, UNLIMITED, INFINITE); ValueError if
    Slurm would not read it."""
    if text.strip().lower() in ("unlimited", "infinite"):
        return None
    for pattern, scale in _TIME_FORMS:
        m = re.fullmatch(pattern, text.strip())
        if m:
            seconds = sum(int(v) * k for v, k in zip(m.groups(), scale))
            return seconds or None
    raise ValueError(text)


def placement_problem(launcher: str | None, devices) -> str | None:
    """Why a run placed by `launcher` cannot train on `devices` (a DeviceSpec), or None: Slurm and Ray place
    CPU processes and GPUs, on one node or several (torchrun); TPUs and XLA are Kaggle's and this machine's."""
    if launcher in ("slurm", "ray") and devices.kind not in ("cpu", "cuda"):
        return f"{launcher} places CPU processes or GPUs (cpu:N, 0,1, N, MxN, Mxcpu:N), not '{devices.text}'"
    return None


class SlurmSettings(BaseModel):
    """The allocation of each attempt of a run placed on Slurm (one sbatch job an attempt). Unset: the
    cluster's own default (its partition's time limit, its default partition and account)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    time: Optional[str] = Field(default=None, description=f"each attempt's time limit ({TIME_WORDS}); the run "
                                "continues in a new job from its last checkpoint when the limit ends one")
    partition: Optional[str] = Field(default=None, description="sbatch --partition")
    account: Optional[str] = Field(default=None, description="sbatch --account")
    cpus_per_task: Optional[int] = Field(default=None, ge=1, le=4096,
                                         description="sbatch --cpus-per-task (default: 8 per GPU, 1 per CPU process)")
    sbatch: list[str] = Field(default_factory=list, description="more sbatch options, one each: --qos=high")
    poll: float = Field(default=2.0, ge=0.5, le=300, description="seconds between two looks at the job (scontrol)")
    margin: Optional[int] = Field(default=None, ge=0, le=86400, description="seconds before the job's end by "
                                  "which the training stops at an epoch boundary, resumable (the final validation "
                                  "and the exit fit in them; the next job continues); unset: a tenth of `time`, "
                                  "at most 600")

    @field_validator("time", mode="before")
    @classmethod
    def _minutes(cls, value):
        """`time: 90` in YAML is a number: minutes, as Slurm reads --time=90."""
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("time")
    @classmethod
    def _slurm_time(cls, value: Optional[str]) -> Optional[str]:
        if value is not None:
            try:
                time_limit_seconds(value)
            except ValueError:
                raise ValueError(f"{value[:40]!r} is not a Slurm time ({TIME_WORDS})") from None
        return value

    @model_validator(mode="after")
    def _margin_inside_the_limit(self):
        limit = time_limit_seconds(self.time) if self.time else None
        if limit is not None and self.margin is not None and self.margin >= limit:
            raise ValueError(f"margin {self.margin} s is not shorter than the time limit ({self.time} = {limit} s): "
                             "every job would stop before it trained; give a smaller margin or a longer time")
        return self

    @field_validator("partition", "account")
    @classmethod
    def _slurm_name(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not SLURM_NAME.fullmatch(value):
            raise ValueError(f"{value[:60]!r} is not a Slurm name ({NAME_WORDS})")
        return value

    @field_validator("sbatch")
    @classmethod
    def _raw_options(cls, value: list[str]) -> list[str]:
        for raw in value:
            if not RAW_OPTION.fullmatch(raw):
                raise ValueError(f"{raw[:60]!r} is not one sbatch option (e.g. --qos=high, no line breaks)")
        return value


DEFAULT_MARGIN_S = 600


def deadline_margin(settings: dict) -> int:
    """Seconds before a job's end by which its training stops (the job's `slurm:` as job.resolved.yaml keeps
    it): `margin` as given, else a tenth of `time`, at most DEFAULT_MARGIN_S (the cluster's own limit, when the
    job gives none, is known only on the node: DEFAULT_MARGIN_S)."""
    if settings.get("margin") is not None:
        return int(settings["margin"])
    limit = time_limit_seconds(settings["time"]) if settings.get("time") else None
    return min(DEFAULT_MARGIN_S, limit // 10) if limit else DEFAULT_MARGIN_S
