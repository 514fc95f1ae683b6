"""`kaggle:` in a job: where the job's data and the offline wheels live on Kaggle, and the
session limits. Every field is optional; `yolo-orch kaggle build` options override them. The XLA
settings (max_boxes, bf16) are the job's `xla:` section, as for every XLA target."""

from __future__ import annotations

from typing import Optional

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# Kaggle refs: "owner/slug", both parts lower-case letters, digits and hyphens.
REF_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,49}/[a-z0-9][a-z0-9-]{1,48}[a-z0-9]$"
SLUG_PATTERN = r"^[a-z0-9][a-z0-9-]{1,48}[a-z0-9]$"
MACHINE_SHAPES = ("TpuV5E8", "TpuV6E8", "NvidiaTeslaT4", "NvidiaTeslaP100", "NvidiaL4", "None")


class KaggleOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    dataset: Optional[str] = Field(
        default=None,
        description="owner/slug of the Kaggle dataset holding the data yaml's images and labels "
        "(not needed for synth data, which the kernel generates)",
    )
    wheels_dataset: Optional[str] = Field(
        default=None,
        description="owner/slug of the wheels dataset made by `yolo-orch kaggle wheels` (default: OWNER/yolo-orch-wheels)",
    )
    kernel: Optional[str] = Field(
        default=None, description="kernel slug (default: yolo-orch-<job name>)"
    )
    machine_shape: str = Field(default="TpuV5E8", min_length=1, max_length=40,
                               description="Kaggle accelerator; TpuV5E8 = TPU v5e-8 (8 cores)")
    enable_internet: bool = Field(default=False, description="internet in the kernel (needed for online W&B)")
    session_hours: float = Field(default=9.0, gt=0.0, le=24.0, description="Kaggle's session limit")
    margin_minutes: float = Field(default=20.0, ge=0.0, le=600.0,
                                  description="stop this long before the session limit (checkpoint, tar, upload)")

    @model_validator(mode="before")
    @classmethod
    def _moved_to_xla(cls, data):
        moved = [k for k in ("max_boxes", "bf16") if isinstance(data, dict) and k in data]
        if moved:
            raise ValueError(f"{', '.join(moved)} moved to the job's `xla:` section (xla.{moved[0]}), which every "
                             "XLA target reads, Kaggle's TPU too")
        return data

    @model_validator(mode="after")
    def _margin_inside_the_session(self):
        if self.margin_minutes >= self.session_hours * 60:
            raise ValueError(f"margin_minutes {self.margin_minutes:g} is not shorter than the session "
                             f"(session_hours {self.session_hours:g} = {self.session_hours * 60:g} min): the kernel "
                             "would stop before it trained")
        return self

    @field_validator("dataset", "wheels_dataset")
    @classmethod
    def _ref(cls, v):
        if v is not None and not re.fullmatch(REF_PATTERN, v):
            raise ValueError(f"expected OWNER/SLUG, the slug 3-50 lower-case letters, digits and '-' (got {v!r})")
        return v

    @field_validator("kernel")
    @classmethod
    def _slug(cls, v):
        if v is not None and not re.fullmatch(SLUG_PATTERN, v):
            raise ValueError(f"expected a slug: 3-50 lower-case letters, digits and '-' (got {v!r})")
        return v
