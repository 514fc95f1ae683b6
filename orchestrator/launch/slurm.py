"""A plain sbatch script that trains a job on Slurm: one task per node, each task runs
`yolo-orch submit JOB --node-rank $SLURM_NODEID --rdzv-endpoint $MASTER_ADDR:$MASTER_PORT`, i.e.
one orchestrator and one torchrun per node (docs/distributed.md). Pure text: no Slurm needed here.

A job requeues itself and resumes: its run id is the Slurm job's (`slurm-<job id>`, kept by a
requeue; on several nodes each node's run is `slurm-<job id>-node<K>` and the weights are node 0's,
on the shared filesystem), `submit --run-id ... --resume-existing` resumes that run when it exists, and
the batch script asks Slurm for SIGUSR1 some time before the limit (`--signal=B:USR1@S`), on
which it requeues the job (`scontrol requeue`). Slurm then stops the step with SIGTERM: the
orchestrator stops the training, keeps its last epoch's checkpoint and marks the run killed; the
requeued job starts the script again and resumes the run at that epoch. A requeue by hand or a
preemption with requeue goes the same way, and so does a run the stall watchdog stopped (exit 124)."""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.devices import DeviceSpec


MAX_STALL_REQUEUES = 5  # a run that keeps stalling stops requeueing itself (time-limit requeues count too)


@dataclass
class SlurmOptions:
    time: str = "24:00:00"
    partition: str | None = None
    account: str | None = None
    cpus_per_task: int | None = None  # default: 8 per GPU, or 1 per CPU process
    port: int = 29500
    python: str = field(default_factory=lambda: sys.executable)
    workdir: Path = field(default_factory=Path.cwd)
    extra_sbatch: list[str] = field(default_factory=list)  # raw "#SBATCH" option strings, e.g. "--qos=high"
    requeue: bool = True  # requeue before the time limit and resume (see above)
    warn_s: int = 120  # how long before the limit Slurm signals (it may come up to a minute earlier)


_TIME_FORMS = (  # Slurm's --time: the forms sbatch(1) lists, as (pattern, seconds per field)
    (r"(\d+)", (60,)), (r"(\d+):(\d+)", (60, 1)), (r"(\d+):(\d+):(\d+)", (3600, 60, 1)),
    (r"(\d+)-(\d+)", (86400, 3600)), (r"(\d+)-(\d+):(\d+)", (86400, 3600, 60)),
    (r"(\d+)-(\d+):(\d+):(\d+)", (86400, 3600, 60, 1)),
)
_SLURM_NAME = re.compile(r"[A-Za-z0-9_.,+@-]{1,128}")  # partitions (a comma list), accounts
_RAW_OPTION = re.compile(r"--?[A-Za-z][A-Za-z0-9-]*(=[^\x00-\x1f\x7f]*)?")  # one option, no line breaks


def time_limit_seconds(text: str) -> int | None:
    """Seconds in a Slurm --time value (None: no limit: 0, UNLIMITED, INFINITE); ValueError if
    Slurm would not read it."""
    if text.strip().lower() in ("unlimited", "infinite"):
        return None
    for pattern, scale in _TIME_FORMS:
        m = re.fullmatch(pattern, text.strip())
        if m:
            seconds = sum(int(v) * k for v, k in zip(m.groups(), scale))
            return seconds or None
    raise ValueError(text)


def option_problems(opts: SlurmOptions) -> list[str]:
    """One line per option Slurm would refuse or misread; every value here goes into the script's
    #SBATCH header, where a line break would start a shell line and end Slurm's reading of the header."""
    problems = []
    try:
        limit = time_limit_seconds(opts.time)
    except ValueError:
        limit = None
        problems.append(f"--time: {opts.time!r} is not a Slurm time (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
                        "D-HH:MM:SS, or UNLIMITED)")
    if opts.requeue and limit is not None and opts.warn_s >= limit:
        problems.append(f"--warn-seconds: {opts.warn_s} s is not before the time limit ({opts.time} = {limit} s): the "
                        "job would requeue before it trained; give a shorter --warn-seconds or a longer --time")
    if not 1 <= opts.port <= 65535:
        problems.append(f"--port: {opts.port} is not a TCP port (1-65535)")
    if opts.cpus_per_task is not None and not 1 <= opts.cpus_per_task <= 4096:
        problems.append(f"--cpus-per-task: must be between 1 and 4096 (got {opts.cpus_per_task})")
    for flag, value in (("--partition", opts.partition), ("--account", opts.account)):
        if value is not None and not _SLURM_NAME.fullmatch(value):
            problems.append(f"--{flag.lstrip('-')}: {value[:60]!r} is not a Slurm name (letters, digits, '_', '.', "
                            "'-'; a comma between partitions)")
    for raw in opts.extra_sbatch:
        if not _RAW_OPTION.fullmatch(raw):
            problems.append(f"--sbatch: {raw[:60]!r} is not one sbatch option (e.g. --qos=high, no line breaks)")
    for flag, value in (("--python", opts.python), ("the working folder", str(opts.workdir))):
        if re.search(r"[\x00-\x1f\x7f]", value):
            problems.append(f"{flag}: {value[:60]!r} holds a line break or control character")
    return problems


def sbatch_script(job_name: str, job_file: Path, devices: DeviceSpec, sets: list[str] | None = None,
                  opts: SlurmOptions | None = None) -> str:
    opts = opts or SlurmOptions()
    cpus = cpus_per_task(opts, devices)
    lines = [
        "#!/bin/bash",
        f"# Generated by `yolo-orch slurm` for job '{job_name}': {devices.nodes} node(s) x {devices.per_node} "
        f"{'GPU(s)' if devices.kind == 'cuda' else 'CPU process(es)'}, world size {devices.world_size}.",
        "# One task per node; each runs `yolo-orch submit` -> one torchrun -> one worker per device.",
        "# Global rank 0 (events.jsonl, summary.json, W&B) runs on the first node of the allocation.",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --nodes={devices.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --cpus-per-task={cpus}",
    ]
    if devices.kind == "cuda":
        lines.append(f"#SBATCH --gpus-per-node={devices.per_node}")
    lines += [f"#SBATCH --time={opts.time}", f"#SBATCH --chdir={opts.workdir}",  # --output is relative to it
              f"#SBATCH --output={job_name}-%j.out"]
    lines += _site_lines(opts)
    requeue = opts.requeue
    if requeue:
        lines += ["#SBATCH --requeue", "#SBATCH --open-mode=append", f"#SBATCH --signal=B:USR1@{opts.warn_s}"]
    submit = [opts.python, "-m", "orchestrator", "submit", str(job_file), "--devices", devices.text]
    for s in sets or []:
        submit += ["--set", s]
    inner = " ".join(shlex.quote(a) for a in submit)
    if devices.nodes > 1:
        inner += ' --node-rank "$SLURM_NODEID" --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT"'
    if requeue:
        inner += ' --run-id "$YOLO_ORCH_RUN_ID" --resume-existing'
    srun = f"srun --kill-on-bad-exit=1 --ntasks-per-node=1 bash -c {shlex.quote('exec ' + inner)}"
    lines += [
        "",
        "set -uo pipefail",
        f"cd {shlex.quote(str(opts.workdir))}",
        'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        f'export MASTER_PORT="${{MASTER_PORT:-{opts.port}}}"',
        "export PYTHONUNBUFFERED=1",
        "",
    ]
    lines += _requeue_lines(srun) if requeue else [
        "# Slurm sends SIGTERM at the time limit: the orchestrator stops every rank and marks the run",
        "# killed, so `yolo-orch resume` can continue it from weights/last.pt.",
        srun,
    ]
    return "\n".join(lines + [""])


def cpus_per_task(opts: SlurmOptions, devices: DeviceSpec) -> int:
    """--cpus-per-task: as asked, else 8 per GPU or 1 per CPU process."""
    return opts.cpus_per_task or (8 * devices.per_node if devices.kind == "cuda" else devices.per_node)


def _site_lines(opts: SlurmOptions) -> list[str]:
    """The cluster's own options: partition, account, any raw #SBATCH line."""
    lines = [f"#SBATCH --partition={opts.partition}"] if opts.partition else []
    if opts.account:
        lines.append(f"#SBATCH --account={opts.account}")
    return lines + [f"#SBATCH {x}" for x in opts.extra_sbatch]


def _requeue_lines(srun: str) -> list[str]:
    return [
        "# The run keeps the Slurm job's id across requeues; a requeued job resumes it.",
        'export YOLO_ORCH_RUN_ID="${YOLO_ORCH_RUN_ID:-slurm-$SLURM_JOB_ID}"',
        "requeue() {  # SIGUSR1 from Slurm (--signal) before the time limit",
        '  echo "yolo-orch: the time limit is near: requeueing job $SLURM_JOB_ID; run $YOLO_ORCH_RUN_ID resumes"',
        '  scontrol requeue "$SLURM_JOB_ID"',
        "}",
        "trap requeue USR1",
        f"{srun} &",
        "step=$!",
        "# a trapped signal ends `wait` early: wait again until the step has really ended",
        'while wait "$step"; code=$?; kill -0 "$step" 2>/dev/null; do :; done',
        f'if [ "$code" = 124 ] && [ "${{SLURM_RESTART_COUNT:-0}}" -lt {MAX_STALL_REQUEUES} ]; then  # the run stalled',
        '  echo "yolo-orch: the run stalled (stacks in its run directory): requeueing job $SLURM_JOB_ID"',
        '  scontrol requeue "$SLURM_JOB_ID"',
        "fi",
        'exit "$code"',
    ]


def sweep_array_script(study: str, sweep_file: Path, workers: int, storage: str, devices: DeviceSpec,
                       opts: SlurmOptions | None = None, extra_args: list[str] | None = None) -> str:
    """A Slurm job array of `workers` tasks, each one `yolo-orch sweep --workers 1` on the same study
    in `storage` (a server database every node reaches): they share the study's trials, and the
    trial of a cancelled or failed task is retried by the others (the study's heartbeat)."""
    opts = opts or SlurmOptions()
    cpus = cpus_per_task(opts, devices)
    lines = [
        "#!/bin/bash",
        f"# Generated by `yolo-orch slurm` for sweep '{study}': {workers} array task(s), each one `yolo-orch sweep`",
        "# worker on the same study; the trials come from and go to its storage (docs/sweeps.md).",
        f"#SBATCH --job-name={study}",
        f"#SBATCH --array=0-{workers - 1}",
        "#SBATCH --ntasks=1",
        f"#SBATCH --cpus-per-task={cpus}",
    ]
    if devices.kind == "cuda":
        lines.append(f"#SBATCH --gpus-per-task={devices.per_node}")
    lines += [f"#SBATCH --time={opts.time}", f"#SBATCH --chdir={opts.workdir}", f"#SBATCH --output={study}-%A_%a.out"]
    lines += _site_lines(opts)
    cmd = [opts.python, "-m", "orchestrator", "sweep", str(sweep_file), "--storage", storage, "--study", study,
           "--workers", "1", *(extra_args or [])]
    lines += ["", "set -uo pipefail", "export PYTHONUNBUFFERED=1", "exec " + " ".join(shlex.quote(a) for a in cmd), ""]
    return "\n".join(lines)
