"""A run placed on a Ray cluster (`target.launcher: ray`, `submit --launcher ray`): each attempt reserves its
nodes and runs the run's own per-node command on each, watched and stopped from this machine by the one runner.

    attempt = RayBackend(settings).start(run_dir, env)   # a placement group of M bundles, one per node
    attempt.wait(0.5)    # None while every node trains, then what the end means
    attempt.stop()       # every node's training stopped (its process group), the reservation freed

One bundle per node (`STRICT_SPREAD`: never two on one node) of the node's devices (CPU processes, or GPUs and
as many CPUs); on each, an actor of this module (`NodeRunner`) starts the node's training as a process group of
its own, its output appended to the run's train.log: one process, a standalone torchrun, or on M nodes one
torchrun per node with the static rendezvous on node 0's address (global rank 0 there). The runs folder must be
on storage every node reaches, as for Slurm: the ranks write their events, heartbeats and weights into it.

How an attempt ends (`RayAttempt.wait`): every node's training exited 0: 0; a node's actor lost with its node
(preempted, crashed, `ray stop`; its raylet gone) is a lost node: the other nodes' trainings are stopped, the
cluster is given `ray.replacement_wait` seconds to offer as many nodes again, and the attempt ends with
EXIT_NEXT_SESSION and `shrunk_to`, the devices the nodes left hold, which the runner re-plans for (images per
step kept: plan/replan.py) before the next attempt continues from the last whole checkpoint. A training that
failed on nodes still there is the run's failure, as on one machine (an OOM re-plans), unless
`ray.max_failures` allows another attempt. Losses and failures are counted apart (Ray Train's FailureConfig).

`ray` is imported only here (and in ray_workers.py, a sweep's workers on the cluster) and only when an attempt
starts: `--help`, `plan` and `--dry-run` never load it."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.devices import DeviceSpec, parse_devices
from orchestrator.jobspec.ray import ENV_ADDRESS, RaySettings
from orchestrator.launch import local, process, torchrun
from orchestrator.launch.backend import EXIT_NEXT_SESSION
from orchestrator.rundir import (ENV_SUPERVISOR_PID, ENV_SUPERVISOR_START, EXIT_OOM, LOG, completed_epochs,
                                 load_resolved, say_in_log, write_text_atomic)
from orchestrator.rundir.resume_order import order_next_attempt

RAY_DIR = "ray"  # in the run folder: attempt-N.json, each attempt's nodes
NAMESPACE = "yolo-orch"
CONFIRM_S = 20.0  # after one node's training failed: how long the others get to say whether their node is gone
EXIT_CANCELLED = 130
FORWARDED = ("YOLO_ORCH_", "WANDB_", "MLFLOW_")  # the submitting environment's variables each node's training gets


def cluster_address(settings: dict) -> str | None:
    """The cluster the run is placed on: the job's `ray.address`, else RAY_ADDRESS (as Ray's tools read it)."""
    return settings.get("address") or os.environ.get(ENV_ADDRESS) or None


def unavailable(settings: dict) -> str | None:
    """Why this machine cannot place a run on Ray, or None: the extra not installed, no address, or an address
    where nothing answers (a TCP connection, without importing ray: `plan` and `--dry-run` stay fast)."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        return "ray places each attempt from this machine: ray is not installed (pip install 'yolo-orch[ray]', or " \
               "scripts/setup.sh ray)"
    address = cluster_address(settings)
    if not address:
        return (f"no Ray cluster named: set {ENV_ADDRESS}=HOST:PORT (the head node's address, as `ray status` reads "
                "it) or give --ray-address")
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except (OSError, ValueError) as exc:
        return (f"the Ray cluster at {address} does not answer ({getattr(exc, 'strerror', None) or exc}); start it "
                "(`ray start --head`) or name another address")
    return None


def interruptible(call, *args, **kwargs):
    """`call(*args, **kwargs)`, a blocking ray call, from which a Ctrl-C's Interrupted (launch/process.py: the
    runner's handler raises it) comes out as itself: raised while ray's C++ code ran, it arrives wrapped in a
    SystemError."""
    try:
        return call(*args, **kwargs)
    except SystemError as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, process.Interrupted):
            raise cause from None
        raise


def node_env(env: dict[str, str]) -> dict[str, str]:
    """What a command started on a node gets over its raylet's environment: the submitting shell's settings of
    the tool, W&B and MLflow (as sbatch exports the submitting shell's), then `env`, less the orchestrator's pid,
    which means nothing on another node (a node's command is stopped through its actor instead)."""
    forwarded = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED)}
    return {**forwarded, **{k: v for k, v in env.items() if k not in (ENV_SUPERVISOR_PID, ENV_SUPERVISOR_START)}}


def bundle_of(devices: DeviceSpec) -> dict[str, float]:
    """What one node of the run reserves: its CPU processes, or its GPUs and a CPU for each."""
    if devices.kind == "cuda":
        return {"GPU": float(devices.per_node), "CPU": float(devices.per_node)}
    return {"CPU": float(devices.per_node)}


def node_command(run_dir: Path, node_rank: int, master: str | None) -> list[str]:
    """What node `node_rank` runs: the run's own command (one process or a standalone torchrun) on one node;
    on several, torchrun with the static rendezvous on node 0 (`master`: HOST:PORT)."""
    resolved = load_resolved(run_dir)
    devices = parse_devices(resolved.plan.devices)
    if devices.nodes == 1:
        return local.command(run_dir) if resolved.plan.launcher == "local" else torchrun.command(run_dir)
    return torchrun.build_command(Path(run_dir), devices.per_node, devices.nodes, node_rank, master, "static")


class NodeRunner:
    """On one node of the cluster (a Ray actor in the node's bundle): the node's training, a process group of its
    own with its output appended to the run's train.log, and its stop."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def where(self, probe: str, token: str) -> dict[str, Any]:
        """This node: its address and Ray id, a free port (for the rendezvous, when it is node 0), and whether
        it sees the file `probe` the runner wrote into the run folder (`token` in it): the shared storage."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        try:
            reaches = Path(probe).read_text() == token
        except OSError:
            reaches = False
        return {"host": ray.util.get_node_ip_address(), "node_id": ray.get_runtime_context().get_node_id(),
                "pid": os.getpid(), "port": port, "reaches_runs": reaches}

    def run(self, command: list[str], env: dict[str, str], log: str, cwd: str) -> int:
        """`command` in `cwd` (the submitting shell's folder, on the shared storage, as a local launch inherits
        it: a job's relative `runs_dir` means the same folder on every node)."""
        command = [sys.executable, *command[1:]]  # this node's Python: the driver's path may not exist here
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(command, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         cwd=cwd if os.path.isdir(cwd) else None)
        return self.proc.wait()

    def stop(self, grace_s: float) -> int | None:
        return process.stop_group(self.proc, grace_s) if self.proc else None

    def signal(self, signum: int) -> None:
        """`signum` to the command's process group (a sweep worker's SIGTERM: its running trial fails cleanly)."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signum)


@dataclass
class RayBackend:
    """Places each attempt of one run on a Ray cluster (a new instance per run: it counts the run's losses)."""

    settings: dict
    name: str = "ray"
    watched: bool = True  # the ranks write their heartbeats into the run folder, on the shared storage
    continue_next: str | None = None  # why the last attempt ended with epochs left: the next one resumes
    shrunk_to: str | None = None  # the devices the nodes left hold, after a lost node: the runner re-plans
    last_devices: str | None = None
    node_losses: int = 0
    failures: int = 0

    @property
    def options(self) -> RaySettings:
        return RaySettings.model_validate(self.settings)

    def start(self, run_dir: Path, env: dict[str, str]) -> "RayAttempt":
        import ray
        from ray.util.placement_group import placement_group

        run_dir = Path(run_dir)
        resolved = load_resolved(run_dir)
        devices = parse_devices(resolved.plan.devices)
        if self.continue_next:
            moved = self.last_devices if self.last_devices not in (None, devices.text) else None
            say_in_log(run_dir, order_next_attempt(resolved.run_id, run_dir, self.continue_next, moved))
        self.continue_next, self.shrunk_to, self.last_devices = None, None, devices.text
        self.connect()
        bundle = bundle_of(devices)
        group = placement_group([bundle] * devices.nodes, strategy="STRICT_SPREAD" if devices.nodes > 1 else "PACK",
                                name=f"yolo-orch-{resolved.run_id}")
        attempt = RayAttempt(self, run_dir, devices, group)
        ready, _ = interruptible(ray.wait, [group.ready()], timeout=self.options.reserve_timeout)
        if not ready:
            attempt.end(1, f"the Ray cluster at {cluster_address(self.settings)} did not give {devices.nodes} node(s) "
                           f"of {_resources(bundle)} within ray.reserve_timeout ({self.options.reserve_timeout} s); "
                           f"`ray status` shows what it has; `yolo-orch resume {resolved.run_id}` continues the run")
            return attempt
        attempt.place(env)
        return attempt

    def connect(self) -> None:
        import ray

        if not ray.is_initialized():
            ray.init(address=cluster_address(self.settings), namespace=NAMESPACE, log_to_driver=False,
                     logging_level=logging.ERROR)
            _cluster_messages_to_stderr()

    def nodes_left(self, devices: DeviceSpec, lost: set[str]) -> int:
        """How many nodes the next attempt gets: as many as before when the cluster offers them within
        ray.replacement_wait (a replacement), else those that fit a bundle now (the lost ones excluded: Ray may
        call a dead node alive for seconds)."""
        import ray

        bundle = bundle_of(devices)
        deadline = time.monotonic() + self.options.replacement_wait
        while True:
            fit = sum(1 for node in ray.nodes() if node.get("Alive") and node["NodeID"] not in lost
                      and all(node.get("Resources", {}).get(k, 0) >= v for k, v in bundle.items()))
            if fit >= devices.nodes or time.monotonic() >= deadline:
                return min(fit, devices.nodes)
            time.sleep(1.0)


@dataclass
class RayAttempt:
    """One attempt: its placement group, one NodeRunner per node and the reference of each node's training."""

    backend: RayBackend
    run_dir: Path
    devices: DeviceSpec
    group: Any
    actors: list = field(default_factory=list)
    places: list[dict] = field(default_factory=list)
    runs: list = field(default_factory=list)  # each node's training: an ObjectRef of its exit code
    codes: dict[int, int] = field(default_factory=dict)
    lost: set[int] = field(default_factory=set)
    code: int | None = None
    note: str | None = None
    pid: int = 0  # no process on this machine: a stop goes through the actors
    record: Path | None = None  # RUN/ray/attempt-N.json
    started: float = 0.0

    def place(self, env: dict[str, str]) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundle = bundle_of(self.devices)
        runner = ray.remote(NodeRunner)
        self.actors = [runner.options(num_cpus=bundle.get("CPU", 0), num_gpus=bundle.get("GPU", 0), max_concurrency=4,
                                      scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, i)).remote()
                       for i in range(self.devices.nodes)]
        self.places = self._look_at_nodes()
        blind = [f"node {r} ({p['host']})" for r, p in enumerate(self.places) if not p.pop("reaches_runs")]
        if blind:
            return self.end(1, f"the runs folder {self.run_dir.parent} is not on storage every node reaches "
                               f"({', '.join(blind)} cannot read what this machine wrote there): put runs_dir on "
                               "a filesystem every node mounts at the same path (NFS, a cloud file store)")
        master = f"{self.places[0]['host']}:{self.places[0]['port']}" if self.devices.nodes > 1 else None
        job_env = node_env(env)
        log = str(self.run_dir / LOG)
        self.runs = [actor.run.remote(node_command(self.run_dir, rank, master), job_env, log, os.getcwd())
                     for rank, actor in enumerate(self.actors)]
        self._record()
        hosts = ", ".join(f"{p['host']} ({p['node_id'][:8]})" for p in self.places)
        say_in_log(self.run_dir, f"Ray: {self.devices.text} on {hosts}; Ctrl-C stops every rank and frees them")

    def _look_at_nodes(self) -> list[dict]:
        """Each node's `where`, with a probe file this machine wrote into the run folder for them to read."""
        import secrets

        import ray

        folder = self.run_dir / RAY_DIR
        folder.mkdir(exist_ok=True)
        token = secrets.token_hex(8)
        probe = folder / f"reach-{token}"
        write_text_atomic(probe, token)
        try:
            return interruptible(ray.get, [actor.where.remote(str(probe), token) for actor in self.actors], timeout=300)
        finally:
            probe.unlink(missing_ok=True)

    def _record(self, **ending: Any) -> None:
        """RUN/ray/attempt-N.json: the nodes this attempt ran on (host, Ray node id, the actor's pid) and, once
        it ended, how (`lost`: the nodes lost and when)."""
        folder = self.run_dir / RAY_DIR
        if self.record is None:
            self.record = folder / f"attempt-{len(list(folder.glob('attempt-*.json'))) + 1}.json"
            self.started = time.time()
        nodes = [{"rank": rank, **place} for rank, place in enumerate(self.places)]
        write_text_atomic(self.record, json.dumps({"devices": self.devices.text, "started": self.started,
                                                   "nodes": nodes, **ending}, indent=1) + "\n")

    def wait(self, timeout_s: float) -> int | None:
        if self.code is None:
            self._collect(timeout_s)
            self._decide()
        return self.code

    def _collect(self, timeout_s: float) -> None:
        """Each node's training that ended within `timeout_s`: its exit code, or its node lost."""
        import ray

        pending = {ref: rank for rank, ref in enumerate(self.runs) if rank not in self.codes and rank not in self.lost}
        if not pending:
            return
        ready, _ = interruptible(ray.wait, list(pending), num_returns=1, timeout=timeout_s)
        for ref in ready:
            try:
                self.codes[pending[ref]] = ray.get(ref)
            except ray.exceptions.RayError:  # its actor died with its node (or its raylet): the node is lost
                self.lost.add(pending[ref])

    def _decide(self) -> None:
        failed = [code for code in self.codes.values() if code != 0]
        if failed and not self.lost:  # a peer's loss often ends a rank first: give the other nodes time to say
            deadline = time.monotonic() + CONFIRM_S
            while not self.lost and len(self.codes) < len(self.runs) and time.monotonic() < deadline:
                self._collect(1.0)
        if self.lost:
            self._node_lost()
        elif failed:
            self._failed(failed[0])
        elif len(self.codes) == len(self.runs):
            self.end(0)

    def _node_lost(self) -> None:
        backend, opts = self.backend, self.backend.options
        now = time.time()
        self._record(lost=[{"rank": r, "node_id": self.places[r]["node_id"], "time": now} for r in sorted(self.lost)])
        self._stop_nodes(grace_s=5)
        backend.node_losses += len(self.lost)
        names = ", ".join(f"node {r} ({self.places[r]['host']}, {self.places[r]['node_id'][:8]})" for r in self.lost)
        resolved = load_resolved(self.run_dir)
        run_id = resolved.run_id
        if completed_epochs(self.run_dir) >= resolved.plan.epochs:  # lost in the final validation: the runner
            return self.end(EXIT_NEXT_SESSION)                        # closes it as finished, nothing to re-plan
        if backend.node_losses > opts.max_node_losses:
            return self.end(1, f"lost {names}: {backend.node_losses} nodes lost, more than ray.max_node_losses "
                               f"({opts.max_node_losses}); `yolo-orch resume {run_id}` continues the run")
        left = backend.nodes_left(self.devices, {self.places[r]["node_id"] for r in self.lost})
        if left == 0:
            return self.end(1, f"lost {names} and no node of the cluster can take its place; `yolo-orch resume "
                               f"{run_id}` continues the run")
        if left < self.devices.nodes:
            backend.shrunk_to = f"{left}x{self.devices.text.split('x', 1)[1]}"
        backend.continue_next = f"lost {names}" + (f"; re-planned for the {left} node(s) left" if backend.shrunk_to
                                                   else "; the cluster gave another")
        self.end(EXIT_NEXT_SESSION)

    def _failed(self, code: int) -> None:
        backend = self.backend
        self._stop_nodes(grace_s=5)
        if code != EXIT_OOM and backend.failures < backend.options.max_failures:
            backend.failures += 1
            backend.continue_next = f"a training failed (exit {code}; ray.max_failures {backend.failures}/" \
                                    f"{backend.options.max_failures})"
            return self.end(EXIT_NEXT_SESSION)
        self.end(code)

    def stop(self, grace_s: float = 15.0) -> int:
        if self.code is None:
            self._stop_nodes(grace_s)
            self.end(EXIT_CANCELLED)
        return self.code

    def _stop_nodes(self, grace_s: float) -> None:
        """Every node's training still running, stopped through its actor (its process group, SIGKILL after
        `grace_s`); a node that does not answer is gone with its processes."""
        import ray

        stops = [actor.stop.remote(grace_s) for rank, actor in enumerate(self.actors)
                 if rank not in self.codes and rank not in self.lost]
        try:
            ray.wait(stops, num_returns=len(stops), timeout=grace_s + 30)
        except ray.exceptions.RayError:
            pass

    def end(self, code: int, note: str | None = None) -> None:
        """The attempt's end: its code and note, its actors and reservation released."""
        import ray
        from ray.util.placement_group import remove_placement_group

        self.code, self.note = code, note
        for actor in self.actors:
            try:
                ray.kill(actor, no_restart=True)
            except (ray.exceptions.RayError, ValueError):
                pass  # gone with its node
        try:
            remove_placement_group(self.group)
        except ray.exceptions.RayError:
            pass


def _cluster_messages_to_stderr() -> None:
    """Ray's driver prints the cluster's messages (a node marked dead) on stdout, which `--json` owns: they go
    to stderr, where the terminal still shows them. (Its module function, looked up at each call by the
    listener thread ray.init started.)"""
    from ray._private import worker

    printed = worker.print_to_stdstream
    if not getattr(printed, "to_stderr", False):
        def to_stderr(data: dict, ignore_prefix: bool) -> None:
            printed({**data, "is_err": True}, ignore_prefix)

        to_stderr.to_stderr = True
        worker.print_to_stdstream = to_stderr


def _resources(bundle: dict[str, float]) -> str:
    return " + ".join(f"{int(v)} {k}" for k, v in bundle.items())
