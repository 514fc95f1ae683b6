"""Sweep workers placed on a Ray cluster (`yolo-orch sweep SWEEP --launcher ray --workers K`): each worker's
command run by an actor of its own (ray_backend.NodeRunner) on a node that has room for the base job's devices,
seen by the sweep's worker loop (application/sweeps.py) as a process."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from orchestrator.launch.ray_backend import NodeRunner, RayBackend, interruptible, node_env


class RayProcess:
    """A command running on a node of the cluster (one sweep worker), with the part of subprocess.Popen's face
    that the sweep's worker loop uses (application/sweeps.py): poll, returncode, send_signal, wait, kill. A
    worker lost with its node ends with EXIT_NODE_LOST; its running trial is failed by its heartbeat and
    retried by the other workers."""

    EXIT_NODE_LOST = 75  # EX_TEMPFAIL: the command did not fail, its node went away

    def __init__(self, actor, run) -> None:
        self.actor, self.run, self.returncode = actor, run, None

    def poll(self) -> int | None:
        import ray

        if self.returncode is None and interruptible(ray.wait, [self.run], timeout=0)[0]:
            try:
                self.returncode = ray.get(self.run)
            except ray.exceptions.RayError:
                self.returncode = self.EXIT_NODE_LOST
        return self.returncode

    def send_signal(self, signum: int) -> None:
        import ray

        if self.poll() is None:
            try:
                self.actor.signal.remote(signum)
            except ray.exceptions.RayError:
                pass

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired("ray worker", timeout)
            time.sleep(0.2)
        return self.returncode

    def kill(self) -> None:
        import ray

        try:
            ray.get(self.actor.stop.remote(0), timeout=30)
            ray.kill(self.actor, no_restart=True)
        except (ray.exceptions.RayError, ValueError):
            pass
        if self.returncode is None:
            self.returncode = -9


def start_on_ray(settings: dict, commands: list[tuple[list[str], dict[str, str], Path]],
                 resources: dict[str, float]) -> list[RayProcess]:
    """Each (command, environment, log) started on the cluster by an actor of its own holding `resources`
    (one sweep worker each: Ray spreads them over the nodes that have room), output appended to its log."""
    backend = RayBackend(settings)
    backend.connect()
    import ray

    runner = ray.remote(NodeRunner)
    started = []
    for command, env, log in commands:
        actor = runner.options(num_cpus=resources.get("CPU", 0), num_gpus=resources.get("GPU", 0),
                               max_concurrency=4, scheduling_strategy="SPREAD").remote()
        started.append(RayProcess(actor, actor.run.remote(command, node_env(env), str(log), os.getcwd())))
    return started
