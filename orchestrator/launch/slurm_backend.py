"""A run placed on Slurm (`target.launcher: slurm`): each attempt of its training is one sbatch job, which
the one runner on this machine (a login node) watches and stops as it does a process group.

    attempt = SlurmBackend(settings, command).start(run_dir, env)   # sbatch run_dir/slurm/attempt-1.sbatch
    attempt.wait(0.5)    # None while the job is pending or running (scontrol), then what its end means
    attempt.stop()       # scancel: Slurm's SIGTERM to the job's processes, SIGKILL after its KillWait

The job runs the run's own per-node command (local or torchrun, from job.resolved.yaml; on several nodes one
torchrun per node, started by srun) with its output appended to the run's train.log; the runs folder must be
on storage every node reaches (a shared filesystem, as for `yolo-orch slurm`), which is where the runner reads
events and heartbeats. The job's script gives the training a deadline, the job's end less `slurm.margin`: it
stops at the last epoch boundary before it, resumable (worker/deadline.py, as a Kaggle session does).

How a job ends decides what comes next (`ending`): a completed or failed job is the training's exit code,
as a process's is; a training its deadline stopped, or a job that Slurm ended with epochs left (its time
limit, a preemption, a lost node), is EXIT_NEXT_SESSION after a checkpoint was added, and the next attempt,
a new job, continues from it (rundir/resume_order.py); the same end without progress stops the run with a
note that says why. No requeue by Slurm itself (--no-requeue): a requeued job would run outside the
runner's count."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from orchestrator.jobspec.slurm import deadline_margin
from orchestrator.launch.backend import EXIT_NEXT_SESSION
from orchestrator.launch.slurm import MASTER_ADDR_LINE, cpus_for, site_lines
from orchestrator.rundir import (ENV_DEADLINE, ENV_SUPERVISOR_PID, ENV_SUPERVISOR_START, LOG, completed_epochs,
                                 load_resolved, say_in_log, write_text_atomic)
from orchestrator.rundir.reading import summary_or_none
from orchestrator.rundir.resume_order import order_next_attempt

SLURM_DIR = "slurm"  # in the run folder: each attempt's script, and the current job's id (JOB_FILE)
JOB_FILE = "job_id"
SLURM_TOOLS = ("sbatch", "scontrol", "scancel")
LOST_IN_A_ROW = 3  # preemptions or lost nodes with no epoch saved in between before the run stops
STILL = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
         "RESIZING", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "STOPPED", "SPECIAL_EXIT", "UPDATE_DB"}
LIMITED = {"TIMEOUT", "DEADLINE"}  # its time ran out: the same limit again gives no more time
LOST = {"PREEMPTED", "NODE_FAIL", "BOOT_FAIL"}  # taken away: another job may get further
EXIT_CANCELLED = 130  # as a Ctrl-C'd command exits


def unavailable() -> str | None:
    """Why this machine cannot place a run on Slurm (its commands missing), or None."""
    import shutil

    missing = [tool for tool in SLURM_TOOLS if shutil.which(tool) is None]
    if missing:
        return (f"slurm submits each attempt from this machine: {', '.join(missing)} not found on PATH (run from a "
                "Slurm login node)")
    return None


def job_record(line: str) -> dict[str, str]:
    """`scontrol show job -o JOB`'s one line as its fields (JobState=RUNNING ExitCode=0:0 ...)."""
    return dict(part.split("=", 1) for part in line.split() if "=" in part)


def query_job(job_id: str) -> dict[str, str] | None:
    """The job's record as Slurm has it now; {} when Slurm does not know it (any more); None when it did not
    answer."""
    try:
        done = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return {} if "Invalid job id" in done.stderr else None
    return job_record(done.stdout) or None


def job_state(record: dict[str, str]) -> str:
    """The record's state word (JobState=CANCELLED carries " by UID" in some releases); "" when none."""
    return (record.get("JobState") or "").split(" ")[0]


def exit_code(text: str) -> int:
    """Slurm's ExitCode `CODE:SIGNAL` as a shell gives it: the code, or 128 + the signal that ended the job."""
    code, _, signal = text.partition(":")
    code_n, signal_n = (int(v) if v.isdigit() else 0 for v in (code, signal))
    return code_n or (128 + signal_n if signal_n else 0)


@dataclass(frozen=True)
class Ending:
    """What a Slurm job's end means for the run: the attempt's code (EXIT_NEXT_SESSION: continue in a new
    job) and, when the runner should say why, a note."""

    code: int
    note: str | None = None


def ending(record: dict[str, str], progressed: bool, lost_in_a_row: int, run_id: str,
           paused: bool = False) -> Ending | None:
    """None while the job is pending or running; else what its end means. `progressed`: an epoch was saved
    during this job; `lost_in_a_row`: the jobs taken away before this one with no epoch saved since; `paused`:
    the training stopped at its deadline before the job's end (the run's summary says paused)."""
    state = job_state(record)
    job = record.get("JobId", "?")
    if state in STILL or not state:
        return None
    resume = f"`yolo-orch resume {run_id}` continues it"
    if state in ("COMPLETED", "FAILED"):
        code = exit_code(record.get("ExitCode", "0:0"))
        if code == 0 and paused:
            return Ending(EXIT_NEXT_SESSION) if progressed else Ending(
                1, f"Slurm job {job} stopped at its deadline before an epoch was saved: give each attempt more "
                   f"time (slurm.time) or a smaller slurm.margin; {resume}")
        return Ending(code)
    if state in LIMITED:
        if progressed:
            return Ending(EXIT_NEXT_SESSION)
        return Ending(1, f"Slurm job {job} reached its time limit ({record.get('TimeLimit', '?')}) before an epoch "
                         f"was saved: give each attempt more time (slurm.time); {resume}")
    if state in LOST:
        if progressed or lost_in_a_row + 1 < LOST_IN_A_ROW:
            return Ending(EXIT_NEXT_SESSION)
        return Ending(1, f"Slurm took {LOST_IN_A_ROW} jobs in a row away ({state}, job {job}) with no epoch saved "
                         f"in between; {resume}")
    if state == "CANCELLED":
        return Ending(EXIT_CANCELLED, f"Slurm job {job} was cancelled (scancel); {resume}")
    if state == "OUT_OF_MEMORY":
        return Ending(1, f"Slurm ended job {job}: its node ran out of memory (sbatch --mem in slurm.sbatch raises "
                         f"it); {resume}")
    return Ending(1, f"Slurm job {job} ended {state}; {resume}")


@dataclass
class SlurmBackend:
    """Places each attempt of one run on Slurm (a new instance per run: it remembers how the last job ended)."""

    settings: dict
    command: Callable[[Path], str]  # what each node runs, a shell line (launch/local.py, torchrun.py)
    name: str = "slurm"
    watched: bool = True  # the ranks write their heartbeats into the run folder, on the shared filesystem
    continue_next: str | None = None  # why the last job ended with epochs left: the next one resumes
    lost_in_a_row: int = 0

    def start(self, run_dir: Path, env: dict[str, str]) -> "SlurmAttempt":
        run_dir = Path(run_dir)
        resolved = load_resolved(run_dir)
        if self.continue_next:
            say_in_log(run_dir, order_next_attempt(resolved.run_id, run_dir, self.continue_next))
        folder = run_dir / SLURM_DIR
        folder.mkdir(exist_ok=True)
        script = folder / f"attempt-{len(list(folder.glob('attempt-*.sbatch'))) + 1}.sbatch"  # a resume's too
        write_text_atomic(script, attempt_script(run_dir, resolved, self.settings, self.command(run_dir), env))
        # the orchestrator's pid means nothing on the node: the job is stopped with scancel instead
        job_env = {k: v for k, v in env.items() if k not in (ENV_SUPERVISOR_PID, ENV_SUPERVISOR_START)}
        try:
            done = subprocess.run(["sbatch", "--parsable", str(script)], env={**os.environ, **job_env},
                                  capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return SlurmAttempt(self, run_dir, "", ended=Ending(1, f"sbatch {script.name}: {exc}"))
        if done.returncode != 0:
            lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
            why = lines[-1] if lines else f"exit {done.returncode}"
            return SlurmAttempt(self, run_dir, "", ended=Ending(1, f"sbatch refused {script.name}: {why}"))
        job_id = done.stdout.strip().split(";")[0]
        write_text_atomic(folder / JOB_FILE, job_id + "\n")
        say_in_log(run_dir, f"Slurm job {job_id} ({script}); `scancel {job_id}` stops it")
        return SlurmAttempt(self, run_dir, job_id, epochs_before=completed_epochs(run_dir))


@dataclass
class SlurmAttempt:
    """One sbatch job of the run."""

    backend: SlurmBackend
    run_dir: Path
    job_id: str
    epochs_before: int = 0
    ended: Ending | None = None
    pid: int = 0  # no process on this machine: the registry records none (a stop is scancel)
    looked: float = field(default=0.0)

    @property
    def note(self) -> str | None:
        return self.ended.note if self.ended else None

    def wait(self, timeout_s: float) -> int | None:
        if self.ended is None:
            time.sleep(timeout_s)
            if time.monotonic() - self.looked >= float(self.backend.settings.get("poll") or 2.0):
                self.looked = time.monotonic()
                self._look()
        return self.ended.code if self.ended else None

    def _look(self) -> None:
        record = query_job(self.job_id)
        if record is None:
            return  # the controller did not answer: look again at the next poll
        progressed = completed_epochs(self.run_dir) > self.epochs_before
        run_id = load_resolved(self.run_dir).run_id
        summary = (summary_or_none(self.run_dir) or {}).get("state")  # paused: its deadline stopped the training
        paused = summary == "paused"
        end = (ending(record, progressed, self.backend.lost_in_a_row, run_id, paused) if record
               else self._forgotten(run_id, summary))
        if end is None:
            return
        self.ended = end
        state = job_state(record)
        self.backend.lost_in_a_row = 0 if progressed else self.backend.lost_in_a_row + (state in LOST)
        how = "stopped at its deadline" if paused else f"ended {state}"
        self.backend.continue_next = f"Slurm job {self.job_id} {how}" if end.code == EXIT_NEXT_SESSION else None

    def _forgotten(self, run_id: str, summary: str | None) -> Ending:
        """Slurm no longer knows the job (its MinJobAge passed while this runner was stopped): the run's own
        summary says how it ended, `finished` for a training that finished every epoch."""
        if summary == "finished":
            return Ending(0)
        return Ending(1, f"Slurm no longer knows job {self.job_id} and the run did not finish (see train.log); "
                         f"`yolo-orch resume {run_id}` continues it")

    def stop(self, grace_s: float = 15.0) -> int:
        """scancel, then wait for Slurm to say the job ended (its processes get SIGTERM, then SIGKILL after
        the cluster's KillWait)."""
        if self.ended is not None or not self.job_id:
            return self.ended.code if self.ended else 1
        subprocess.run(["scancel", self.job_id], capture_output=True, timeout=60)
        deadline = time.monotonic() + grace_s + 120
        while time.monotonic() < deadline:
            record = query_job(self.job_id)
            if record == {} or (record and job_state(record) not in STILL):
                break
            time.sleep(1)
        self.ended = Ending(EXIT_CANCELLED, None)
        return EXIT_CANCELLED


def attempt_script(run_dir: Path, resolved, settings: dict, node_line: str, env: dict[str, str]) -> str:
    """The sbatch script of one attempt: the run's nodes, one task each running `node_line`, the output
    appended to train.log. On several nodes, global rank 0 is on the allocation's first node, the static
    rendezvous's host (MASTER_ADDR), on a port drawn from the job's id. Only what the job needs that the
    submitting shell may not hand on (sbatch exports its environment unless the cluster says otherwise):
    the tool's PYTHONPATH; never a secret (those reach the job through the environment sbatch exports, as
    every other variable does)."""
    from orchestrator.devices import parse_devices

    devices = parse_devices(resolved.plan.devices)
    cpus = cpus_for(devices, settings.get("cpus_per_task"))
    lines = [
        "#!/bin/bash",
        f"# Generated by yolo-orch for run {resolved.run_id} ({devices.text}): one attempt; the runner that "
        "submitted it watches it (scontrol) and continues the run in a new job when Slurm ends this one first.",
        f"#SBATCH --job-name={resolved.job.name}",
        f"#SBATCH --nodes={devices.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --cpus-per-task={cpus}",
    ]
    if devices.kind == "cuda":
        lines.append(f"#SBATCH --gpus-per-node={devices.per_node}")
    if settings.get("time"):
        lines.append(f"#SBATCH --time={settings['time']}")
    lines += [f"#SBATCH --chdir={run_dir}", f"#SBATCH --output={run_dir / LOG}", "#SBATCH --open-mode=append",
              "#SBATCH --no-requeue"]
    lines += site_lines(settings.get("partition"), settings.get("account"), settings.get("sbatch") or [])
    lines += ["", "set -uo pipefail", "export PYTHONUNBUFFERED=1"]
    if env.get("PYTHONPATH"):
        lines.append(f"export PYTHONPATH={shlex.quote(env['PYTHONPATH'])}")
    lines += _deadline_lines(deadline_margin(settings))
    if devices.nodes == 1:
        return "\n".join(lines + ["exec " + node_line, ""])
    return "\n".join(lines + [
        MASTER_ADDR_LINE,
        'export MASTER_PORT="$((20000 + SLURM_JOB_ID % 20000))"',
        "# one task per node; a node that fails ends the others (--kill-on-bad-exit)",
        f"exec srun --kill-on-bad-exit=1 --ntasks-per-node=1 bash -c {shlex.quote('exec ' + node_line)}", ""])


def _deadline_lines(margin: int) -> list[str]:
    """The job's end (its time limit, known once it starts) less `margin`, as the training's deadline: it stops
    at the last epoch boundary that leaves the margin (worker/deadline.py), resumable; a job without an end
    (UNLIMITED) gets none."""
    return [
        "# stop at an epoch boundary before the job's end, resumable: the runner continues the run in a new job",
        'end="$(squeue -h -j "$SLURM_JOB_ID" -o %e 2>/dev/null)"',
        f'if end_s="$(date -d "$end" +%s 2>/dev/null)"; then export {ENV_DEADLINE}="$((end_s - {margin}))"; fi',
    ]


def active_job(run_dir: Path) -> str | None:
    """The Slurm job of the run's last attempt while Slurm still has it pending or running (a runner killed
    -9 leaves it training): a resume must not start a second training beside it."""
    path = Path(run_dir) / SLURM_DIR / JOB_FILE
    if not path.is_file() or path.is_symlink():
        return None
    job_id = path.read_text().strip()
    return job_id if job_state(query_job(job_id) or {}) in STILL else None


