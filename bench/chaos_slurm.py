"""The chaos campaign's Slurm faults (bench/chaos.py): a one-node cluster on loopback that the campaign
starts in its folder (scripts/slurm_cluster.sh: Debian's slurm-wlm and munge, installed when missing)
and jobs submitted as `yolo-orch slurm` prints them, with sbatch:

- slurm-requeue: `scontrol requeue JOB` at a moment drawn from the seed (a preemption with requeue, or
  an admin's requeue): Slurm stops the step with SIGTERM, and the requeued job resumes the run;
- slurm-time-limit: a job with `--time 1` whose training lasts longer, warned `--warn-seconds W`
  before (W drawn from the seed; Slurm signals up to a minute early): each allocation ends with
  SIGUSR1, the script requeues the job, the next allocation resumes, until the run finishes.

Slurm holds a requeued job for about two minutes (Reason=BeginTime); the campaign lets it go after
5 s with `scontrol update JobId=N StartTime=now`, as the test suite does (at once, the new
allocation can race the old one's cleanup). The user's part afterwards: nothing while the job
requeues itself; `yolo-orch resume` if it ended with the run unfinished."""

from __future__ import annotations

import os
import time
from pathlib import Path

from chaos_common import Episode, cli, env_for, resume_until_done, row_of, wait_point
from orchestrator.harness.runs import wait_for
from orchestrator.harness.services import SlurmCluster, slurm_command, slurm_job

KINDS = ("slurm-requeue", "slurm-time-limit")
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
         "PREEMPTED"}
LONG_IMAGES = 1280  # the time-limit job's training set: its 5 epochs last longer than a 1-minute allocation


class SlurmJob:
    """A submitted job seen as a process: `poll()` is None while it has not ended."""

    def __init__(self, cluster: SlurmCluster, work: Path, job_id: str):
        self.cluster, self.work, self.id = cluster, work, job_id
        self.env = cluster.env(env_for(work))

    def record(self) -> dict:
        return slurm_job(self.env, self.id)

    def poll(self) -> str | None:
        state = self.record().get("JobState")
        return state if state in ENDED else None

    def wait_end(self, timeout: float = 900) -> dict:
        """The job's record once it ended; a requeued job held by Slurm is let go after 5 s."""
        held_since: list[float] = []

        def ended() -> bool:
            job = self.record()
            if job.get("JobState") in ENDED:
                return True
            held = job.get("JobState") == "PENDING" and job.get("Reason") == "BeginTime"
            if not held:
                held_since.clear()
            elif not held_since:
                held_since.append(time.time())
            elif time.time() - held_since[0] > 5:
                slurm_command(self.env, "scontrol", "update", f"JobId={self.id}", "StartTime=now")
            return False

        wait_for(ended, timeout=timeout, poll=1.0)
        return self.record()


def submit(cluster: SlurmCluster, work: Path, episode: Episode, warn_s: int) -> SlurmJob:
    """`yolo-orch slurm` for the campaign's job (the time-limit kind: its longer twin), then sbatch."""
    job_file = "job.yaml" if episode.kind == "slurm-requeue" else write_long_job(work)
    flags = ["--time", "1", "--warn-seconds", str(warn_s)] if episode.kind == "slurm-time-limit" else []
    out = cli("slurm", job_file, "--devices", episode.devices, *flags, work=work)
    if out.returncode != 0:
        raise RuntimeError(f"yolo-orch slurm: {out.stderr.strip()[-300:]}")
    script = work / f"{episode.kind}-{episode.number}.sbatch"
    script.write_text(out.stdout)
    return SlurmJob(cluster, work, slurm_command(cluster.env(env_for(work)), "sbatch", "--parsable", str(script)).split(";")[0])


def write_long_job(work: Path) -> str:
    import yaml

    job = yaml.safe_load((work / "job.yaml").read_text())
    job["data"]["synth"]["images"] = LONG_IMAGES
    (work / "long-job.yaml").write_text(yaml.safe_dump(dict(job, name="chaos-long"), sort_keys=False))
    return "long-job.yaml"


def run_slurm_episode(work: Path, cluster: SlurmCluster, episode: Episode, rng) -> Episode:
    started = time.time()
    warn_s = rng.randint(15, 35)
    job = submit(cluster, work, episode, warn_s)
    episode.notes.append(f"Slurm job {job.id}" + (f", --time 1 --warn-seconds {warn_s}"
                                                   if episode.kind == "slurm-time-limit" else ""))
    row = wait_point(work, started, episode.at_epoch if episode.kind == "slurm-requeue" else 0, episode.delay_s, job)
    if row is None:
        episode.notes.append(f"the run did not start ({job.poll() or 'job running'})")
        job.wait_end()
        return episode
    episode.run_id, episode.run_dir = row["id"], row["run_dir"]
    if episode.kind == "slurm-requeue" and job.poll() is None:
        running = (row_of(work, episode.run_id) or {}).get("state") == "running"
        slurm_command(cluster.env(env_for(work)), "scontrol", "requeue", job.id)
        episode.struck = running
    record = job.wait_end()
    restarts = int(record.get("Restarts") or 0)
    episode.notes.append(f"job {record.get('JobState')} after {restarts} requeue(s)")
    if episode.kind == "slurm-time-limit":
        episode.struck = restarts >= 1  # the limit struck at least once (else the training was too short)
    if episode.struck:
        resume_until_done(work, episode)  # a user's part, if the job ended with the run unfinished
    else:
        episode.state = (row_of(work, episode.run_id) or {}).get("state")
    episode.wall_s = round(time.time() - started, 1)
    return episode


def usable() -> str | None:
    """Why this machine cannot run a Slurm cluster for the campaign (None: it can)."""
    import shutil

    if shutil.which("slurmctld") and shutil.which("munged"):
        return None
    if os.geteuid() != 0:
        return "slurm-wlm and munge are not installed, and installing them needs root"
    if shutil.which("apt-get") is None:
        return "slurm-wlm and munge are not installed, and there is no apt-get to install them"
    return None
