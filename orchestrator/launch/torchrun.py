"""Data-parallel training: one `python -m torch.distributed.run` per node, one worker per device.

Single node (`cpu:N`, `0,1,2,3`, `N`): ``--standalone`` (a private c10d rendezvous on a free
local port, so concurrent runs on one machine never collide).

Several nodes (`MxN`, `Mxcpu:N`): every node runs ``yolo-orch submit`` with its own
``--node-rank`` and the same ``--rdzv-endpoint HOST:PORT`` (HOST = node 0). Two rendezvous
backends:

static (default)  ``--master-addr/--master-port`` + ``--node-rank``: node k hosts global ranks
                  k*N .. k*N+N-1, so global rank 0 (events, summary, W&B) is on node 0, whose
                  orchestrator is the one that shows progress.
c10d              ``--rdzv-backend c10d --rdzv-endpoint --rdzv-id``: elastic rendezvous; torch
                  assigns node ranks by sorted node id, so rank 0 may land on any node.

The command is rebuilt from ``job.resolved.yaml`` (``plan.devices`` and ``plan.launch``), the run's
single source of truth. No torch import here: the CLI stays fast.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.rundir import NodeOptions, load_resolved
from orchestrator.devices import DeviceSpec, parse_devices
from orchestrator.errors import UserError

WORKER_MODULE = "orchestrator.worker.ddp"
RDZV_BACKENDS = ("static", "c10d")


@dataclass(frozen=True)
class NodeLaunch:
    """This node's torchrun options as `submit` was given them (--node-rank, --rdzv-*): an input to
    planning (plan.make_plan), checked there against the devices and kept in the plan's `launch`."""

    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_backend: str = "static"
    rdzv_id: str | None = None
    require: bool = True  # False for a dry run: a multi-node spec may still lack its rendezvous

    def options(self, devices: DeviceSpec) -> dict[str, Any]:
        """The plan's `launch` for these devices: {} for one process given none of the options."""
        if devices.backend != "torchrun" and self.node_rank is None and self.rdzv_endpoint is None:
            return {}
        return launch_options(devices, self.node_rank, self.rdzv_endpoint, self.rdzv_backend, self.rdzv_id,
                              self.require)


def parse_endpoint(text: str) -> tuple[str, int]:
    """'HOST:PORT' (or '[v6]:PORT') -> (host, port)."""
    m = re.fullmatch(r"\[?([^\[\]\s]+?)\]?:(\d{1,5})", text.strip())
    if not m or not (0 < int(m.group(2)) < 65536):
        raise UserError(f"--rdzv-endpoint: '{text}' is not HOST:PORT (e.g. node0.cluster:29500)")
    return m.group(1), int(m.group(2))


def launch_options(devices: DeviceSpec, node_rank: int | None = None, rdzv_endpoint: str | None = None,
                   rdzv_backend: str = "static", rdzv_id: str | None = None, require: bool = True) -> dict[str, Any]:
    """Validate the multi-node options against the device spec; the dict goes to plan.launch.
    `require=False` (dry runs): a multi-node spec may still lack its rendezvous."""
    problems = []
    if rdzv_backend not in RDZV_BACKENDS:
        problems.append(f"--rdzv-backend: '{rdzv_backend}' is not one of {', '.join(RDZV_BACKENDS)}")
    if not devices.distributed and (node_rank is not None or rdzv_endpoint is not None):
        problems.append(f"--node-rank/--rdzv-endpoint: '{devices.text}' is one process; they apply to "
                        "several devices (cpu:N, 0,1, MxN, Mxcpu:N)")
    elif devices.nodes > 1:
        if (rdzv_endpoint is None or node_rank is None) and not require:
            pass
        elif rdzv_endpoint is None or node_rank is None:
            problems.append(
                f"target.devices: '{devices.text}' spans {devices.nodes} nodes: run submit on every node with "
                f"--node-rank 0..{devices.nodes - 1} and the same --rdzv-endpoint HOST:PORT (HOST = node 0), "
                "or generate a Slurm script with `yolo-orch slurm JOB`"
            )
        elif not 0 <= node_rank < devices.nodes:
            problems.append(f"--node-rank: {node_rank} is outside 0..{devices.nodes - 1} for '{devices.text}'")
    elif node_rank not in (None, 0):
        problems.append(f"--node-rank: {node_rank} given, but '{devices.text}' is a single node (use MxN)")
    if rdzv_endpoint is not None:
        try:
            parse_endpoint(rdzv_endpoint)
        except UserError as exc:
            problems.extend(exc.problems)
    if problems:
        raise UserError(problems)
    if (devices.nodes == 1 and rdzv_endpoint is None) or (devices.nodes > 1 and rdzv_endpoint is None):
        return {}
    opts: dict[str, Any] = {"node_rank": node_rank or 0, "rdzv_endpoint": rdzv_endpoint, "rdzv_backend": rdzv_backend}
    if rdzv_id:
        opts["rdzv_id"] = rdzv_id
    return opts


def build_command(run_dir: Path, nproc_per_node: int, nnodes: int = 1, node_rank: int = 0,
                  rdzv_endpoint: str | None = None, rdzv_backend: str = "static",
                  rdzv_id: str | None = None, python: str | None = None) -> list[str]:
    cmd = [python or sys.executable, "-m", "torch.distributed.run"]
    if nnodes == 1 and rdzv_endpoint is None:
        cmd += ["--standalone", "--nnodes=1"]
    else:
        if rdzv_endpoint is None:
            raise UserError(f"{nnodes} nodes need a rendezvous endpoint HOST:PORT")
        host, port = parse_endpoint(rdzv_endpoint)
        cmd += [f"--nnodes={nnodes}", f"--node-rank={node_rank}"]
        if rdzv_backend == "static":
            cmd += [f"--master-addr={host}", f"--master-port={port}"]
        else:
            cmd += ["--rdzv-backend=c10d", f"--rdzv-endpoint={host}:{port}", f"--rdzv-id={rdzv_id or 'yolo-orch'}"]
    return cmd + worker_args(run_dir, nproc_per_node)


def worker_args(run_dir: Path, nproc_per_node: int) -> list[str]:
    """torchrun's arguments after the rendezvous: the ranks of this node and the worker they run."""
    return [
        f"--nproc-per-node={nproc_per_node}",
        "--max-restarts=0",  # a failed rank ends the run (the orchestrator reports it); no silent restarts
        "--monitor-interval=1",
        "-m", WORKER_MODULE, str(run_dir),
    ]


SLURM_NODE_RENDEZVOUS = '--node-rank="$SLURM_NODEID" --master-addr="$MASTER_ADDR" --master-port="$MASTER_PORT"'


def slurm_node_line(run_dir: Path) -> str:
    """Every node's torchrun in one multi-node Slurm job, as one shell line: the node's rank and the static
    rendezvous come from the job's environment (SLURM_NODEID; MASTER_ADDR and MASTER_PORT, which the job's
    script sets: launch/slurm_backend.py), so global rank 0 is on the allocation's first node."""
    devices = parse_devices(load_resolved(run_dir).plan.devices)
    head = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={devices.nodes}"]
    tail = worker_args(Path(run_dir), devices.per_node)
    return f"{shlex.join(head)} {SLURM_NODE_RENDEZVOUS} {shlex.join(tail)}"


def command(run_dir: Path) -> list[str]:
    resolved = load_resolved(run_dir)
    devices = parse_devices(resolved.plan.devices)
    node = resolved.plan.launch or NodeOptions()
    return build_command(
        Path(run_dir),
        nproc_per_node=devices.per_node,
        nnodes=devices.nodes,
        node_rank=node.node_rank,
        rdzv_endpoint=node.rdzv_endpoint,
        rdzv_backend=node.rdzv_backend,
        rdzv_id=node.rdzv_id or resolved.job.name,
    )
