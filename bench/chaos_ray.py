"""The chaos campaign's Ray fault (bench/chaos.py): a cluster of two raylets of 1 CPU on this machine, in a network
namespace of its own (harness.services.RayCluster), started when the first such episode is drawn:

- ray-node-loss: a `2xcpu:1` run placed on Ray (`submit --launcher ray`, W&B offline as users have it); at an
  epoch and a delay drawn from the seed, the worker node is killed as a lost machine (its raylet and every
  process under it). The run must finish on the node left, re-planned (`ray.replacement_wait` 5 s: no
  replacement comes here), each epoch once; a node lost in the final validation leaves it closed as finished.
  A node is added again after each episode. The user's part afterwards: nothing, or `yolo-orch resume` (inside
  the namespace, where the cluster is) if the run stopped."""

from __future__ import annotations

import time
from pathlib import Path

from chaos_common import STARTED, Episode, env_for, finish, resume_until_done, row_of, wait_point
from orchestrator.harness.cli import start_cli
from orchestrator.harness.services import RayCluster

KINDS = ("ray-node-loss",)
DEVICES = "2xcpu:1"


def met_a_loss(run_dir: Path) -> bool:
    """An attempt of the run saw a node lost (its record, RUN/ray/attempt-N.json): re-planned, or, in the final
    validation, closed as finished."""
    import json

    return any(json.loads(record.read_text()).get("lost") for record in (run_dir / "ray").glob("attempt-*.json"))


def run_ray_episode(work: Path, cluster: RayCluster, episode: Episode) -> Episode:
    started = time.time()
    env = cluster.env(env_for(work))
    proc = start_cli("submit", "job.yaml", "--json", "--devices", DEVICES, "--launcher", "ray", "--set",
                     "ray.replacement_wait=5", cwd=work, env=env, outputs=work / "outputs", prefix=cluster.prefix)
    STARTED.append(proc)
    row = wait_point(work, started, episode.at_epoch, episode.delay_s, proc, placed=True)
    if row is None:
        finish(proc, timeout=600)
        episode.notes.append("the run did not start")
        return episode
    episode.run_id, episode.run_dir = row["id"], row["run_dir"]
    alive = proc.poll() is None
    if alive:
        cluster.kill_node(1)
        episode.notes.append(f"worker node killed after epoch {episode.at_epoch} + {episode.delay_s} s")
    finish(proc, timeout=600)
    cluster.add_node()
    episode.struck = alive and met_a_loss(Path(row["run_dir"]))  # (a run that ended before the kill did not)
    if episode.struck:
        resume_until_done(work, episode, prefix=cluster.prefix, env=env)
    episode.state = (row_of(work, episode.run_id) or {}).get("state")
    episode.wall_s = round(time.time() - started, 1)
    return episode


def usable() -> str | None:
    """Why this machine cannot run the campaign's Ray cluster (None: it can): ray, unshare and nsenter, and root
    for a network namespace."""
    import importlib.util
    import os
    import shutil

    if importlib.util.find_spec("ray") is None:
        return "ray is not installed (scripts/setup.sh test)"
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return "unshare or nsenter is missing (util-linux)"
    return None if os.geteuid() == 0 else "a network namespace of its own needs root"
