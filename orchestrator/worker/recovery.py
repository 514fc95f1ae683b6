"""Resume and OOM handling inside the training process (imports torch lazily).

- Resume: the runner writes a resume order (rundir.ResumeOrder: checkpoint, if_missing) into
  job.resolved.yaml.
  Ultralytics' `check_resume` restores the checkpoint's own train args and lets only a few
  change (batch, device, workers, imgsz, ...); `nbs`, `lr0` and `weight_decay` are not among
  them. A re-planned resume (another device count, or a smaller batch after an OOM) needs
  them, so the worker writes `weights/resume.pt`: last.pt with `train_args` replaced by the
  run's current train arguments, and resumes from that. Ultralytics then restores the
  optimizer state (including each group's weight decay and initial lr, which follow the OLD
  plan); `on_pretrain_routine_end` below sets them to what the current arguments give, exactly
  as `_build_train_pipeline` computes them for a fresh run (a no-op when nothing changed).
- OOM: Ultralytics 8.4 halves the batch itself after a CUDA OOM in the first epoch
  (single-GPU only), recomputing accumulate from the old nbs, which changes the images per
  optimizer step. The worker switches that off (`_oom_retries` at its limit every epoch), so
  every OOM reaches `train()`, which emits an `oom` event and exits with EXIT_OOM; the runner
  re-plans through the scaler and restarts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from orchestrator.errors import RunStateError
from orchestrator.rundir import (ENV_SUPERVISOR_PID, ENV_SUPERVISOR_START, EVENTS, EXIT_OOM, RESUME_PATCHED,
                                 EventWriter, ResolvedRun, die_with_parent, is_primary, process_alive, rank,
                                 replaced_atomically, write_bytes_atomic)

ULTRALYTICS_OOM_LIMIT = 3  # BaseTrainer._do_train: `self._oom_retries >= 3` re-raises
OOM_MARKERS = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED")


class NotResumable(RunStateError):
    """The checkpoint the resume order names cannot be resumed (the worker ends with EXIT_NOT_RESUMABLE)."""


def is_oom(exc: BaseException) -> bool:
    try:
        import torch

        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return True
    except ImportError:  # pragma: no cover
        pass
    return isinstance(exc, RuntimeError) and any(m.lower() in str(exc).lower() for m in OOM_MARKERS)


def report_oom(run_dir: Path, model, exc: BaseException) -> None:
    """Every rank that hit the OOM appends one `oom` event (one O_APPEND write: safe across ranks)."""
    trainer = getattr(model, "trainer", None)
    world = max(int(getattr(trainer, "world_size", 0) or 0), 1)
    batch = getattr(trainer, "batch_size", None)
    epoch = getattr(trainer, "epoch", None)
    EventWriter(run_dir / EVENTS).emit(
        "oom",
        epoch=None if epoch is None else int(epoch) + 1,
        batch=batch,
        batch_per_device=None if batch is None else int(batch) // world,
        rank=rank(),
        error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}",
    )
    print(f"yolo-orch: CUDA out of memory at epoch {epoch if epoch is None else int(epoch) + 1} "
          f"(batch {batch}); exiting with code {EXIT_OOM} so the orchestrator can restart with a smaller "
          "per-device batch", flush=True)


def resume_arguments(run_dir: Path, resolved: ResolvedRun, args: dict[str, Any]) -> dict[str, Any] | None:
    """Train kwargs for a resume, or None for a fresh start. `args` are the plan's train args
    (without `model`). Raises NotResumable when the checkpoint cannot be resumed and the
    runner asked to fail rather than start over."""
    order = resolved.resume
    if order is None:
        return None
    ckpt_path = run_dir / order.checkpoint
    fallback = order.if_missing == "scratch"
    if not ckpt_path.is_file():
        if fallback:
            return None
        raise NotResumable(f"{ckpt_path} does not exist")
    import torch

    try:
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    except Exception as exc:  # a checkpoint cut short by a kill while it was being written
        if fallback:
            print(f"yolo-orch: cannot read {ckpt_path} ({exc}); starting over", flush=True)
            return None
        raise NotResumable(f"{ckpt_path} cannot be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(ckpt, dict) or ckpt.get("optimizer") is None or int(ckpt.get("epoch", -1)) < 0:
        if fallback:
            return None
        raise NotResumable(f"{ckpt_path} has no optimizer state or epoch (a finished run's stripped checkpoint); "
                           "nothing to resume")
    train_args = dict(ckpt.get("train_args") or {})
    train_args.update({k: v for k, v in args.items() if k not in ("model", "resume")})
    train_args.update(project=str(run_dir.parent), name=run_dir.name, save_dir=str(run_dir), exist_ok=True)
    ckpt["train_args"] = train_args
    # next to the checkpoint: on another node of a multi-node run that is node 0's run directory
    # (a shared filesystem), where global rank 0 writes it and every other rank waits for it
    patched = ckpt_path.parent / RESUME_PATCHED.name
    if is_primary():
        with replaced_atomically(patched) as tmp:
            torch.save(ckpt, tmp)
    else:
        _wait_for(patched)
    kwargs = {k: v for k, v in args.items() if k != "model"}
    kwargs["resume"] = str(patched)
    return kwargs


def _wait_for(path: Path, timeout_s: float = 600) -> None:
    import time

    deadline = time.time() + timeout_s
    while not path.exists() and time.time() < deadline:
        time.sleep(0.2)


def cleanup(run_dir: Path) -> None:
    if is_primary():
        try:
            (run_dir / RESUME_PATCHED).unlink()
        except FileNotFoundError:
            pass


def _disable_ultralytics_oom_halving(trainer) -> None:
    trainer._oom_retries = ULTRALYTICS_OOM_LIMIT


def _sync_resumed_optimizer(trainer) -> None:
    """After Ultralytics loaded the checkpoint's optimizer state: weight decay and initial lr as the
    current args give them (what _build_train_pipeline would set on a fresh run)."""
    if not getattr(trainer, "resume", False) or trainer.optimizer is None:
        return
    args = trainer.args
    bs = trainer.batch_size
    acc = max(round(args.nbs / bs), 1)
    wd = args.weight_decay * bs * acc / args.nbs
    base_lrs = list(getattr(trainer.scheduler, "base_lrs", []) or [])
    for i, group in enumerate(trainer.optimizer.param_groups):
        if group.get("param_group") in {"weight", "muon"}:
            group["weight_decay"] = wd
        if i < len(base_lrs):
            group["initial_lr"] = base_lrs[i]


class AtomicPath(type(Path())):
    """A checkpoint path whose `write_bytes` (what Ultralytics' save_model calls for last.pt and
    best.pt) writes a temporary file and renames it: a full disk or a kill mid-write leaves the
    previous good checkpoint, never a truncated one."""

    def write_bytes(self, data) -> int:
        return write_bytes_atomic(self, data, fsync=True)


def _atomic_checkpoints(trainer) -> None:
    trainer.last, trainer.best = AtomicPath(trainer.last), AtomicPath(trainer.best)
    import ultralytics.engine.trainer as trainer_module

    if not getattr(trainer_module.strip_optimizer, "atomic", False):
        trainer_module.strip_optimizer = _atomic_strip(trainer_module.strip_optimizer)


def _atomic_strip(strip_optimizer):
    """Ultralytics' final `strip_optimizer(last.pt)` rewrites the file in place with torch.save: save the
    stripped checkpoint beside it and rename, so a disk that fills up then keeps the old one whole."""

    def strip(f, s: str = "", updates=None):
        with replaced_atomically(Path(s or f)) as tmp:  # an invalid checkpoint writes none: nothing replaced
            return strip_optimizer(f, s=str(tmp), updates=updates)

    strip.atomic = True
    return strip


def attach(model, run_dir: Path) -> None:
    model.add_callback("on_pretrain_routine_start", _atomic_checkpoints)
    model.add_callback("on_train_epoch_start", _disable_ultralytics_oom_halving)
    model.add_callback("on_pretrain_routine_end", _sync_resumed_optimizer)


# ---------------------------------------------------------------- die with the orchestrator


def watch_supervisor(interval_s: float = 1.0) -> None:
    """When the orchestrator that started this run vanishes (kill -9, crash), end this process
    group too: no orphan keeps training (and holding GPUs) while the registry says killed.
    Linux: PR_SET_PDEATHSIG for the direct child; every platform: a daemon thread that checks
    the supervisor's PID + start time and SIGKILLs this process group (every rank and dataloader
    worker of the run; the runner starts it in its own session)."""
    pid = int(os.environ.get(ENV_SUPERVISOR_PID) or 0)
    if pid <= 0:
        return
    import signal
    import threading

    identity = os.environ.get(ENV_SUPERVISOR_START) or None
    if os.getppid() == pid:
        die_with_parent(signal.SIGKILL)
    try:
        own_group = os.getpgrp()
        if own_group == os.getpgid(pid):
            return  # same process group as the orchestrator: killing it would kill the orchestrator
    except (ProcessLookupError, PermissionError):
        own_group = os.getpgrp()

    def watch() -> None:
        import time

        while process_alive(pid, identity):
            time.sleep(interval_s)
        print(f"yolo-orch: orchestrator (pid {pid}) vanished; stopping this run's processes", flush=True)
        os.killpg(own_group, signal.SIGKILL)

    if not process_alive(pid, identity):
        watch()
    threading.Thread(target=watch, name="yolo-orch-supervisor-watch", daemon=True).start()
