"""The real services the tests and campaigns start for themselves: a PostgreSQL server of their own (an
outage is a stop), a Slurm cluster of one or two nodes on loopback (scripts/slurm_cluster.sh), a Ray cluster of
two or more nodes in a network namespace of its own, a small tmpfs disk that fills up, a read-only bind mount.
Each that cannot start here raises `Unavailable` (one line)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from orchestrator.harness import Unavailable
from orchestrator.harness.cli import REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL server's bin folder (Debian's layout), None when there is none."""
    bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return bins[-1].parent if bins else None


class PrivateServer:
    """A PostgreSQL server of its own: initdb in a temporary folder outside any 0700 one (the server runs
    as `postgres` when this is root), its own port, trust auth on loopback. `.url`, `.stop(mode)`
    (`immediate`: as a crash, recovered from the WAL on start), `.start()`, `.remove()`."""

    def __init__(self):
        self.bin = postgres_bin()
        if self.bin is None:
            raise Unavailable("no PostgreSQL server binaries under /usr/lib/postgresql (apt-get install postgresql)")
        self.folder = Path(tempfile.mkdtemp(prefix="yolo-orch-pg-"))
        self.data, self.sock, self.port = self.folder / "pgdata", self.folder / "pgsock", free_port()
        self._as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        try:
            self._make()
        except BaseException:  # a SIGTERM or Ctrl-C during initdb or the start: nothing is left behind
            self.remove()
            raise

    def _make(self) -> None:
        self.folder.chmod(0o755)
        self.sock.mkdir()
        if self._as_postgres:
            for path in (self.folder, self.sock):
                shutil.chown(path, "postgres")
        _run_whole([*self._as_postgres, str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U",
                    "postgres"])
        self.start()

    def _ctl(self, *args: str) -> None:
        subprocess.run([*self._as_postgres, str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", *args],
                       check=True, capture_output=True)

    def start(self) -> None:
        self._ctl("-o", f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1", "-l",
                  str(self.folder / "server.log"), "start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "stop")

    def remove(self) -> None:
        """Stopped (if it runs) and its folder gone."""
        try:
            if (self.data / "postmaster.pid").exists():
                self.stop("immediate")
        except subprocess.CalledProcessError:
            pass  # not running
        for _ in range(20):  # a killed initdb's last write may land after the first pass
            shutil.rmtree(self.folder, ignore_errors=True)
            if not self.folder.exists():
                return
            time.sleep(0.1)


def _run_whole(args: list[str]) -> None:
    """`args` to the end, in a process group of its own; interrupted (a SIGTERM, Ctrl-C), the whole group is
    killed before the exception goes on. subprocess.run kills only its child: `runuser`'s own child, initdb,
    and initdb's `postgres --boot` went on writing into the folder that remove() was deleting, and left it
    behind (test_chaos saw it once in a CI run at e99643b)."""
    import signal

    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate()
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        raise
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, args, out, err)


class MlflowServer:
    """`mlflow server` on a loopback port of its own, its SQLite store in `folder` (MLflow's job runner off:
    it starts seven consumer processes a test does not need). `.url`, `.stop()` (the whole process group:
    uvicorn's workers too), `.start()` again on the same port and store. `store`: serve that store instead (a
    runs folder's sqlite:///RUNS_DIR/mlflow.db, as `mlflow ui` would)."""

    def __init__(self, folder: Path, timeout: float = 120, store: str | None = None):
        import sys

        self.folder, self.port, self.timeout = Path(folder), free_port(), timeout
        self.folder.mkdir(parents=True, exist_ok=True)
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                        store or f"sqlite:///{self.folder / 'server.db'}", "--artifacts-destination",
                        (self.folder / "artifacts").as_uri(), "--host", "127.0.0.1", "--port", str(self.port),
                        "--workers", "1"]
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        import time
        import urllib.request

        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        with open(self.folder / "server.log", "a") as log:
            self.proc = subprocess.Popen(self.command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise Unavailable(f"mlflow server exited {self.proc.returncode}: see {self.folder / 'server.log'}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise Unavailable(f"mlflow server did not answer within {self.timeout:.0f} s")

    def stop(self) -> None:
        import signal

        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.proc = None


class TensorBoardServer:
    """`tensorboard --logdir logdir` on a loopback port of its own; `.url`, `.stop()`."""

    def __init__(self, logdir: Path, timeout: float = 120):
        import sys
        import time
        import urllib.request

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host",
                                      "127.0.0.1", "--port", str(self.port)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise Unavailable(f"tensorboard exited {self.proc.returncode}: {self.proc.stderr.read()[-300:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/data/logdir", timeout=2):
                    return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise Unavailable(f"tensorboard did not answer within {timeout:.0f} s")

    def stop(self) -> None:
        import signal

        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


def slurm_command(env: dict[str, str], *args: str) -> str:
    """A Slurm command (sbatch, scontrol, ...) under `env`'s SLURM_CONF: its output; RuntimeError when it fails."""
    out = subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {out.stderr.strip()}")
    return out.stdout.strip()


def slurm_job(env: dict[str, str], job_id: str) -> dict[str, str]:
    """`scontrol show job`'s record of a job."""
    line = slurm_command(env, "scontrol", "show", "job", "-o", job_id)
    return dict(part.split("=", 1) for part in line.split() if "=" in part)


class SlurmCluster:
    """A one-node Slurm cluster of its own (scripts/slurm_cluster.sh: Debian's slurm-wlm and munge, installed
    when missing), configured in a short folder under the system's temporary folder: slurmd makes a Unix
    socket per job step in its spool, and a socket path past 108 bytes (a deep test folder, as pytest-xdist
    makes them) fails every step, so the job is requeued for ever. `nodes=2`: a second node on this machine
    (its own slurmd), so a job may span two. `env(base)`: `base` with its SLURM_CONF, for
    slurm_command/slurm_job and the commands that submit to it; `stop()` also removes the folder."""

    SCRIPT = REPO / "scripts" / "slurm_cluster.sh"

    def __init__(self, nodes: int = 1):
        folder = self.folder = Path(tempfile.mkdtemp(prefix="slurm-"))
        start = subprocess.run(["bash", str(self.SCRIPT), "start", str(folder), str(nodes)], capture_output=True,
                               text=True, timeout=600)
        if start.returncode != 0:
            lines = (start.stderr or start.stdout).strip().splitlines()
            raise Unavailable(f"no Slurm cluster here: {lines[-1] if lines else f'exit {start.returncode}'}")
        self.conf = str(folder / "slurm.conf")

    def env(self, base: dict[str, str]) -> dict[str, str]:
        return dict(base, SLURM_CONF=self.conf)

    def stop(self) -> None:
        subprocess.run(["bash", str(self.SCRIPT), "stop", str(self.folder)], capture_output=True, timeout=120)
        shutil.rmtree(self.folder, ignore_errors=True)


class RayCluster:
    """A Ray cluster of `nodes` nodes (each a raylet of its own, `cpus` CPUs) on this machine, in a network
    namespace of its own where only loopback is: every address Ray binds and dials there is 127.0.0.1 (outside
    one, Ray dials this machine's interface address, which these machines do not route). `prefix` runs a
    command inside it (`nsenter`): the CLI that places runs there and `ray` itself; `env(base)` adds
    RAY_ADDRESS. `kill_node(i)` ends live node i (0: the head) as a lost machine would: its raylet and every process under it (its
    actors and their trainings) SIGKILLed at once; `add_node()` starts another; `stop()` removes it all."""

    HEAD_PORT = 6379
    address = f"127.0.0.1:{HEAD_PORT}"

    def __init__(self, nodes: int = 2, cpus: int = 1):
        import sys

        self.ray = str(Path(sys.executable).parent / "ray")
        if not Path(self.ray).is_file() or shutil.which("unshare") is None or shutil.which("nsenter") is None:
            raise Unavailable("no Ray cluster here: ray (scripts/setup.sh test), unshare or nsenter is missing")
        self.cpus, self.ports, self.started = cpus, [], 0  # ports: the live nodes' raylet ports, head first
        self.folder = Path(tempfile.mkdtemp(prefix="ray-"))  # short: Ray's socket paths must fit 107 bytes
        self.holder = subprocess.Popen(["unshare", "-n", "sleep", "infinity"], start_new_session=True)
        self.prefix = ("nsenter", "-t", str(self.holder.pid), "-n")
        try:
            self._wait_for_namespace()
            self._run("ip", "link", "set", "lo", "up")
            self._start("--head", f"--port={self.HEAD_PORT}", "--include-dashboard=false")
            for _ in range(nodes - 1):
                self.add_node()
        except (Unavailable, subprocess.TimeoutExpired):
            self.stop()
            raise

    def _wait_for_namespace(self) -> None:
        """Until `unshare` has made the namespace: entered before that, nsenter would join this one."""
        ours = os.readlink("/proc/self/ns/net")
        for _ in range(100):
            try:
                if os.readlink(f"/proc/{self.holder.pid}/ns/net") != ours:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise Unavailable("no Ray cluster here: `unshare -n` made no network namespace")

    def env(self, base: dict[str, str]) -> dict[str, str]:
        return dict(base, RAY_ADDRESS=self.address, RAY_USAGE_STATS_ENABLED="0")

    def _run(self, *args: str, timeout: float = 120) -> str:
        done = subprocess.run([*self.prefix, *args], capture_output=True, text=True, timeout=timeout,
                              env=self.env(dict(os.environ)))
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines()
            raise Unavailable(f"no Ray cluster here: {' '.join(args[:3])}: {lines[-1] if lines else done.returncode}")
        return done.stdout

    def _start(self, *args: str) -> None:
        port = 6400 + self.started  # each node's raylet port: how kill_node finds it
        self.started += 1
        self._run(self.ray, "start", *args, f"--num-cpus={self.cpus}", f"--node-manager-port={port}",
                  "--disable-usage-stats", f"--temp-dir={self.folder}", timeout=180)
        self.ports.append(port)

    def add_node(self) -> None:
        self._start(f"--address={self.address}")

    def kill_node(self, index: int) -> None:
        import psutil

        port = self.ports.pop(index)  # the live nodes are numbered again: the head is 0
        raylets = [p for p in psutil.process_iter(["cmdline"])
                   if f"--node_manager_port={port}" in (p.info["cmdline"] or [])]
        doomed = [*raylets, *(c for r in raylets for c in r.children(recursive=True))]
        for proc in doomed:
            try:
                proc.kill()
            except psutil.Error:
                pass

    def stop(self) -> None:
        try:
            subprocess.run([*self.prefix, self.ray, "stop", "--force"], capture_output=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.holder.kill()
        self.holder.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def mount(args: list[str], what: str) -> None:
    """`mount ARGS`; Unavailable (root is needed) when it fails."""
    r = subprocess.run(["mount", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise Unavailable(f"cannot mount {what} here ({(r.stderr or r.stdout).strip()}); this needs root")


def mount_small_disk(folder: Path, mib: int) -> Path:
    """A real filesystem of `mib` MiB that fills up (a tmpfs) at `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    mount(["-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", str(folder)], "a tmpfs")
    return folder


def resize_small_disk(folder: Path, mib: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={mib}m", str(folder)], check=True)


def mount_read_only(folder: Path, view: Path) -> Path:
    """`folder` seen through a read-only bind mount at `view` (a colleague's runs folder)."""
    view.mkdir(parents=True, exist_ok=True)
    mount(["--bind", str(folder), str(view)], "a bind mount")
    mount(["-o", "remount,bind,ro", str(view)], "a read-only bind mount")
    return view


def unmount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)
