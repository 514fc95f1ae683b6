"""Kubernetes pods run here as their controllers would run them (issue 65): each pod of a manifest is its
container's command as a local process, with the environment the controller injects (the Job controller's
`JOB_COMPLETION_INDEX`, Kubeflow Trainer's `PET_*` variables), the container's own `env` values, the pods'
stable host names answered by 127.0.0.1 (each pod in a mount namespace of its own whose /etc/hosts says so),
the claim's folder as the working folder, and a container that fails started again as `restartPolicy:
OnFailure` does: after the kubelet's back-off, while the Job's backoffLimit allows. No cluster is involved:
what is tested is what yolo-orch puts in the manifests and what its pods then do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.harness.cli import cli_env
from orchestrator.harness.services import Unavailable

# the kubelet's back-off before it starts a failed container again: 10 s, doubled each time, at most 300 s
BACKOFF_S, BACKOFF_MAX_S = 10.0, 300.0
TRAINER_MASTER_PORT = "29400"  # Kubeflow Trainer's torch plugin: node 0's port in PET_MASTER_PORT


@dataclass
class Pod:
    host: str  # the pod's stable host name (a Job's NAME-K, a TrainJob's NAME-node-0-K)
    command: list[str]
    env: dict[str, str]
    proc: subprocess.Popen | None = None  # the container running now; None while it waits for its restart
    restarts: int = 0
    exits: list[int] = field(default_factory=list)
    next_start: float = 0.0
    done: bool = False  # its container exited 0: the pod completed


def job_pods(job: dict) -> list[Pod]:
    """An Indexed Job's pods: one per index, JOB_COMPLETION_INDEX set, as the Job controller does."""
    spec = job["spec"]
    container = spec["template"]["spec"]["containers"][0]
    return [Pod(f"{job['metadata']['name']}-{i}", container["command"],
                {**_values(container.get("env", [])), "JOB_COMPLETION_INDEX": str(i)})
            for i in range(spec["completions"])]


def trainjob_pods(trainjob: dict) -> list[Pod]:
    """A TrainJob's node pods on the torch-distributed runtime: its JobSet's pods NAME-node-0-K, each with the
    PET_* variables the torch plugin sets (node 0's address and port, this node's rank, the node count)."""
    name, trainer = trainjob["metadata"]["name"], trainjob["spec"]["trainer"]
    nodes = trainer["numNodes"]
    master = f"{name}-node-0-0.{name}"
    return [Pod(f"{name}-node-0-{k}", trainer["command"],
                {**_values(trainer.get("env", [])), "PET_NNODES": str(nodes), "PET_NODE_RANK": str(k),
                 "PET_MASTER_ADDR": master, "PET_MASTER_PORT": TRAINER_MASTER_PORT, "PET_NPROC_PER_NODE": "auto"})
            for k in range(nodes)]


def _values(env: list[dict]) -> dict[str, str]:
    """The container's env with a value; a Secret's keys (valueFrom) stay unset: no Secret here."""
    return {e["name"]: e["value"] for e in env if "value" in e}


class PodGroup:
    """The pods of one manifest, started together in `folder` (the claim), watched and started again as the
    kubelet would. `hosts`: the stable names that resolve to this machine (a Service's, a JobSet's)."""

    def __init__(self, pods: list[Pod], folder: Path, hosts: list[str], backoff_limit: int, logs: Path,
                 env: dict | None = None):
        if shutil.which("unshare") is None:
            raise Unavailable("no mount namespaces here: unshare is missing")
        self.pods, self.folder, self.backoff_limit, self.logs = pods, folder, backoff_limit, logs
        self.env = env or {}
        self.failures = 0
        logs.mkdir(parents=True, exist_ok=True)
        self.hosts_file = logs / "hosts"
        self.hosts_file.write_text("127.0.0.1 localhost\n" + "".join(f"127.0.0.1 {h}\n" for h in hosts))

    def start(self) -> None:
        for pod in self.pods:
            self._start(pod)

    def _start(self, pod: Pod) -> None:
        env = cli_env({**self.env, **pod.env, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"})
        mount_hosts = 'mount --bind "$0" /etc/hosts && exec "$@"'
        cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", mount_hosts, str(self.hosts_file), *pod.command]
        log = open(self.logs / f"{pod.host}.{pod.restarts}.log", "w")
        with log:
            pod.proc = subprocess.Popen(cmd, cwd=self.folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)

    def kill(self, index: int) -> None:
        """The pod's container killed at once with every process under it, whatever group each made for
        itself (a node lost: its PID namespace ends)."""
        _kill_tree(self.pods[index].proc)

    def run(self, timeout: float) -> list[Pod]:
        """Until every pod's container has exited 0, starting a failed one again after the kubelet's back-off;
        AssertionError when the failures pass the backoffLimit (the Job failed) or the time runs out."""
        deadline = time.time() + timeout
        while not all(pod.done for pod in self.pods):
            if time.time() > deadline:
                self.stop()
                raise AssertionError(f"the pods did not finish within {timeout} s: " + self.describe())
            for pod in self.pods:
                self._watch(pod)
            time.sleep(0.2)
        return self.pods

    def _watch(self, pod: Pod) -> None:
        if pod.done:
            return
        if pod.proc is not None:
            code = pod.proc.poll()
            if code is None:
                return
            pod.exits.append(code)
            pod.proc = None
            if code == 0:
                pod.done = True
                return
            self.failures += 1
            if self.failures > self.backoff_limit:
                self.stop()
                raise AssertionError(f"backoffLimit {self.backoff_limit} passed: " + self.describe())
            pod.next_start = time.time() + min(BACKOFF_S * 2 ** pod.restarts, BACKOFF_MAX_S)
        if time.time() >= pod.next_start:
            pod.restarts += 1
            self._start(pod)

    def describe(self) -> str:
        tails = []
        for pod in self.pods:
            log = self.logs / f"{pod.host}.{pod.restarts}.log"
            tail = log.read_text()[-1500:] if log.exists() else ""
            tails.append(f"{pod.host}: exits {pod.exits}, restarts {pod.restarts}\n{tail}")
        return "\n".join(tails)

    def stop(self) -> None:
        for pod in self.pods:
            if pod.proc is not None and pod.proc.poll() is None:
                _kill_tree(pod.proc)


def _kill_tree(proc: subprocess.Popen) -> None:
    import psutil

    try:
        doomed = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        doomed = []
    for p in doomed:
        try:
            p.kill()
        except psutil.Error:
            pass
    proc.wait(timeout=30)
