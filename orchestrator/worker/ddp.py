"""One torchrun rank: rebuilds the Ultralytics trainer from job.resolved.yaml inside an existing
process group instead of letting Ultralytics pickle itself and respawn.

    python -m torch.distributed.run ... -m orchestrator.worker.ddp RUN_DIR

What differs from stock Ultralytics, and why (everything else is Ultralytics' own code path, so the
scaler's `effective` values hold: per-device batch = batch // world_size, accumulate from the TOTAL
batch, weight decay x batch*accumulate/nbs, loss x world_size, DistributedSampler, seeds seed+1+RANK):

- world_size comes from torchrun (WORLD_SIZE), not from the device string: Ultralytics counts the
  devices in `device=` (0 on CPU, and one node only), which is wrong for `cpu:N` and for MxN.
- `_setup_ddp` on CPU: gloo and the CPU device (Ultralytics only knows cuda/npu/xpu there).
  On GPUs Ultralytics' own `_setup_ddp` runs (NCCL, device = the LOCAL_RANK-th id of `device=`).
- the DDP wrap on CPU passes device_ids=None (Ultralytics passes [device.index], which DDP rejects
  for CPU modules), and converts BatchNorm to SyncBatchNorm first when `sync_bn: true`.
- the final validation of best.pt on CPU ranks: Ultralytics' standalone validator puts DDP ranks on
  `cuda:<current device>`; on CPU it gets the CPU.
- Ultralytics never respawns: it is already a rank (LOCAL_RANK is set), and `ddp` is forced off.

Process hygiene and logs: every rank dies with its torchrun agent (PR_SET_PDEATHSIG), writes
`rank<RANK>.log` into the run dir, and the first rank of each node (LOCAL_RANK 0) also tees to
torchrun's stdout, i.e. the run's train.log.

The trainer class itself is in worker/ddp_trainer.py (it imports torch). The tests check what each
rank really applied with a hook loaded by name (tests/helpers/rank_probe.py).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from pathlib import Path

from orchestrator.rundir import Ranks, ResolvedRun, RunPlan, die_with_parent


class _Tee:
    """fd-level tee of stdout+stderr into a file and the original stdout (C code, subprocesses and
    Python all write to fd 1/2, so a sys.stdout wrapper would miss most of it)."""

    def __init__(self, log_fd: int):
        self.log_fd = log_fd
        self.orig = os.dup(1)
        r, w = os.pipe()
        os.dup2(w, 1)
        os.dup2(w, 2)
        os.close(w)
        self.r = r
        self.thread = threading.Thread(target=self._pump, name="rank-log-tee", daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        while True:
            try:
                chunk = os.read(self.r, 65536)
            except OSError:
                return
            if not chunk:
                return
            for fd in (self.orig, self.log_fd):
                try:
                    os.write(fd, chunk)
                except OSError:
                    pass

    def close(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os.dup2(self.orig, 1)  # drop our ends of the pipe: the pump sees EOF once children let go too
        os.dup2(self.orig, 2)
        self.thread.join(timeout=5)


def redirect_output(run_dir: Path, rank: int, local_rank: int) -> _Tee | None:
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    fd = os.open(run_dir / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    if local_rank == 0:
        tee = _Tee(fd)
        atexit.register(tee.close)
        return tee
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return None


def bn_momentum_factor(plan: RunPlan) -> float:
    """How many times fewer batches per epoch each rank runs than the reference did.

    BatchNorm running statistics (what validation and the saved model use) move once per forward
    pass with a fixed momentum (Ultralytics: 0.03). Each of W ranks runs 1/W of the batches of an
    epoch, so with the same momentum the running statistics would take W times as many EPOCHS to
    follow the weights; early in short runs they lag, and validation suffers (the cpu vs cpu:2
    parity run showed it). With momentum m' = 1 - (1 - m)^k, k = reference batches per epoch / this
    rank's, the running statistics cover the same number of epochs as at the reference."""
    eff, ref = plan.effective, plan.reference_effective
    if eff.get("batches_per_epoch") and ref.get("batches_per_epoch"):
        return ref["batches_per_epoch"] / eff["batches_per_epoch"]
    if eff.get("batch_per_device") and ref.get("batch_per_device"):
        return (eff["batch_per_device"] * eff["world_size"]) / (ref["batch_per_device"] * max(ref["world_size"], 1))
    return float(plan.world_size)


# Each task's trainer class, in ultralytics.models.yolo's module of the task's name (the plan refuses a task the
# installed release lacks: scaling/releases.py)
TRAINERS = {"detect": "DetectionTrainer", "segment": "SegmentationTrainer", "pose": "PoseTrainer",
            "obb": "OBBTrainer", "classify": "ClassificationTrainer", "semantic": "SemanticSegmentationTrainer",
            "depth": "DepthTrainer"}


def task_trainer(task: str):
    """The Ultralytics trainer class of `task`, as `YOLO(model, task=...)` picks it."""
    from ultralytics.models import yolo

    # looked up by name: the semantic and depth modules exist from 8.4.52 and 8.4.104 only
    return getattr(getattr(yolo, task), TRAINERS[task])


def trainer_factory(resolved: ResolvedRun):
    """train.train() calls this after the offline setup: the trainer class for this rank."""
    import torch

    if resolved.plan.on_cpu:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(Ranks.here().local_world_size, 1)))
    from orchestrator.worker.ddp_trainer import make_trainer_class

    base = task_trainer(resolved.job.task)
    return make_trainer_class(base, sync_bn=resolved.job.sync_bn, bn_momentum_factor=bn_momentum_factor(resolved.plan))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: torchrun ... -m orchestrator.worker.ddp RUN_DIR", file=sys.stderr)
        return 2
    ranks = Ranks.here()
    if not ranks.under_torchrun:
        print("orchestrator.worker.ddp runs under torchrun (RANK/WORLD_SIZE unset); "
              "use orchestrator.worker.train for one process", file=sys.stderr)
        return 2
    run_dir = Path(argv[0]).resolve()
    # the kernel kills this rank when its torchrun agent dies, even by SIGKILL (torchrun starts every
    # worker in its own session, so signalling the agent's process group misses them)
    die_with_parent(signal.SIGKILL)
    redirect_output(run_dir, ranks.rank, ranks.local_rank)
    from orchestrator.worker.train import train

    try:
        code = train(run_dir, trainer_factory=trainer_factory)
    finally:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    if code == 0 and ranks.rank != 0 and ranks.local_rank == 0:
        node_summary(run_dir, ranks)
    return code


def node_summary(run_dir: Path, ranks: Ranks) -> None:
    """A node without global rank 0 (multi-node): its run dir gets a summary too, so its
    orchestrator reports the finished state; metrics, events and weights are in node 0's run dir."""
    from orchestrator.rundir import SUMMARY, load_resolved, write_json_atomic

    if (run_dir / SUMMARY).exists() or load_resolved(run_dir).job.placement:
        return  # (a run placed on Slurm: every node trains in the one run folder, whose summary is rank 0's)
    write_json_atomic(run_dir / SUMMARY, {
        "state": "finished",
        "primary": False,
        "node_rank": ranks.node_rank,
        "world_size": ranks.world_size,
        "metrics": {},
        "note": "global rank 0 ran on node 0: its run dir holds events.jsonl, the metrics and the weights",
    })


if __name__ == "__main__":
    sys.exit(main())
