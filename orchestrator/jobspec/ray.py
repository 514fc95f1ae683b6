"""The job's `ray:` section: where a run placed on a Ray cluster (`target.launcher: ray`) finds the cluster
and how much loss it survives. The cluster's address is Ray's own: RAY_ADDRESS, as `ray status` reads it,
or `ray.address` (`submit --ray-address`); launch/ray_backend.py places the nodes."""

from __future__ import annotations

import re
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

ENV_ADDRESS = "RAY_ADDRESS"  # Ray's own variable: `ray start --address`, `ray status`, ray.init() read it
ADDRESS = re.compile(r"(ray://)?\[?[A-Za-z0-9_.:-]+\]?:\d{1,5}")  # HOST:PORT of the head's GCS (or a ray:// client)


class RaySettings(BaseModel):
    """A run placed on Ray: each attempt reserves its nodes (one placement-group bundle per node, spread over
    nodes) and runs the node's training there; a node lost mid-run re-plans the run for the nodes left."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    address: Optional[str] = Field(default=None, description="the cluster's HOST:PORT (the head's GCS port, "
                                   "6379 by default); unset: RAY_ADDRESS, as Ray's own tools read it")
    replacement_wait: int = Field(default=120, ge=0, le=86400, description="seconds to wait, after a node was "
                                  "lost, for the cluster to offer as many nodes again (an autoscaler's "
                                  "replacement) before the run is re-planned for the nodes left")
    max_node_losses: int = Field(default=3, ge=0, le=1000, description="nodes lost (preempted, crashed, "
                                 "stopped) that the run survives, each re-planned; Ray Train's max_failures "
                                 "for preemptions")
    max_failures: int = Field(default=0, ge=0, le=1000, description="trainings that fail on nodes that are "
                              "still there (a rank's error) and start again from the last checkpoint; 0: the "
                              "run stops with the error, as on one machine")
    reserve_timeout: int = Field(default=300, ge=1, le=86400, description="seconds an attempt waits for its "
                                 "nodes (the placement group) before the run stops with what the cluster lacks")

    @field_validator("address")
    @classmethod
    def _address(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not ADDRESS.fullmatch(value.strip()):
            raise ValueError(f"{value!r} is not HOST:PORT (the head node's address, e.g. 10.0.0.5:6379)")
        return value.strip() if value else value
