"""A run's checkpoints, read without torch: is a file whole, at which epoch, can it be resumed, and
which one a resume continues from when weights/last.pt is damaged.

A checkpoint is a zip archive (torch.save) with a CRC per record, so `zipfile.testzip` finds a
truncated or corrupted file without loading a tensor; its `data.pkl` record is read with every
class stubbed out, which gives the plain fields (epoch, whether optimizer state is there) and runs
no code from the file. The checkpoints are written atomically (worker/recovery.py), so damage comes
from outside: a copy cut short, a failing disk, a file edited by hand.

When last.pt is damaged, the resume falls back to the newest sound, resumable checkpoint of the run
(best.pt, or an epoch<N>.pt of `save_period`): the epochs after it train again, declared by a
`rewind` event in events.jsonl, and their results.csv rows move to results.rewound.csv."""

from __future__ import annotations

import os
import pickle
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from orchestrator.rundir import BEST, EVENTS, LAST, RESULTS, EventWriter, end_torn_line, row_epoch
from orchestrator.rundir.files import replaced_atomically, write_text_atomic

REWOUND_RESULTS = "results.rewound.csv"  # results.csv rows of epochs a rewind trains again
DAMAGED_LAST = LAST.with_name("last.pt.damaged")  # the damaged last.pt, kept as it was (not a *.pt)


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    epochs: int = 0  # epochs trained when it was written (Ultralytics' `epoch` + 1; 0: a finished run's)
    resumable: bool = False  # optimizer state and an epoch: a training can continue from it
    damage: str | None = None  # why it does not load (None: it is whole)

    @property
    def sound(self) -> bool:
        return self.damage is None


class _Stub:
    """Whatever class or function the pickle names: built and called without running anything."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Stub()

    def __setstate__(self, state):
        pass


class _FieldsOnly(pickle.Unpickler):
    SAFE = {("collections", "OrderedDict"), ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "slice"),
            ("datetime", "datetime"), ("datetime", "timezone"), ("datetime", "timedelta")}

    def find_class(self, module: str, name: str):
        return super().find_class(module, name) if (module, name) in self.SAFE else _Stub

    def persistent_load(self, pid):
        return None  # a tensor's storage: not read


def inspect_checkpoint(path: Path, verify: bool = True) -> Checkpoint:
    """Whether `path` is whole (`verify`: every record's CRC, which reads the whole file; without it
    only the fields are read) and at which epoch; never raises for a damaged file."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip() if verify else None
            if bad is not None:
                return Checkpoint(path, damage=f"record {bad} fails its CRC check")
            pickled = next((n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
            if pickled is None:
                return Checkpoint(path, damage="no data.pkl record (not a torch checkpoint)")
            with archive.open(pickled) as f:
                fields = _FieldsOnly(f).load()
    except FileNotFoundError:
        return Checkpoint(path, damage="missing")
    except (zipfile.BadZipFile, OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError,
            AttributeError, IndexError, KeyError) as exc:
        return Checkpoint(path, damage=f"{type(exc).__name__}: {exc}"[:200] or "unreadable")
    if not isinstance(fields, dict):
        return Checkpoint(path, damage="not an Ultralytics checkpoint (no dict at its top)")
    epoch = fields.get("epoch")
    epoch = epoch if isinstance(epoch, int) else -1
    return Checkpoint(path, epochs=max(epoch + 1, 0), resumable=fields.get("optimizer") is not None and epoch >= 0)


def fallback_checkpoint(weights_dir: Path) -> Checkpoint | None:
    """The newest sound, resumable checkpoint besides last.pt: best.pt or an epoch<N>.pt. Their fields
    first (small reads), then the CRCs newest first until one is whole: a run with many epoch<N>.pt is
    not read in full."""
    candidates = [weights_dir / "best.pt", *sorted(weights_dir.glob("epoch*.pt"))]
    fields = [c for c in (inspect_checkpoint(p, verify=False) for p in candidates if p.is_file())
              if c.sound and c.resumable]
    for newest in sorted(fields, key=lambda c: c.epochs, reverse=True):
        checked = inspect_checkpoint(newest.path)
        if checked.sound and checked.resumable:
            return checked
    return None


def rewind_to(run_dir: Path, fallback: Checkpoint, damage: str) -> list[int]:
    """Make the run directory consistent at `fallback` (its weights/last.pt damaged): the `rewind`
    event first (a crash after it only repeats the rewind), then results.csv's later rows moved aside,
    then last.pt replaced by a copy of the fallback (the damaged file kept as last.pt.damaged), last so
    that it is newer than results.csv (rundir.completed_epochs). Returns the epochs that train again."""
    run_dir = Path(run_dir)
    again = declare_rewind(run_dir, fallback.epochs, str(fallback.path.relative_to(run_dir)), damage)
    rewind_results(run_dir, fallback.epochs)
    keep_damaged(run_dir / LAST, run_dir / DAMAGED_LAST)
    with replaced_atomically(run_dir / LAST) as tmp:
        shutil.copyfile(fallback.path, tmp)
    return again


def rewind_to_start(run_dir: Path, damage: str) -> list[int]:
    """`rewind_to` when no checkpoint of the run is whole: every epoch trains again (last.pt moves to
    last.pt.damaged, so the training starts from epoch 1)."""
    run_dir = Path(run_dir)
    again = declare_rewind(run_dir, 0, None, damage)
    rewind_results(run_dir, 0)
    keep_damaged(run_dir / LAST, run_dir / DAMAGED_LAST)
    (run_dir / LAST).unlink(missing_ok=True)
    return again


def declare_rewind(run_dir: Path, epochs: int, checkpoint: str | None, damage: str) -> list[int]:
    """The `rewind` event: the epochs after `epochs` that results.csv recorded train again."""
    again = sorted({e for e in results_epochs(run_dir) if e > epochs})
    end_torn_line(run_dir / EVENTS)
    EventWriter(run_dir / EVENTS).emit("rewind", to_epoch=epochs + 1, epochs=again, checkpoint=checkpoint,
                                       reason=f"{LAST} does not load: {damage}")
    return again


def keep_damaged(last: Path, kept: Path) -> None:
    """A second name for the damaged file (a hard link: no copy), so that replacing last.pt never
    leaves the run without one."""
    if not last.is_file():
        return
    with replaced_atomically(kept) as tmp:
        try:
            os.link(last, tmp)
        except OSError:  # a filesystem without hard links
            shutil.copyfile(last, tmp)


def set_aside_damaged_weights(run_dir: Path) -> str | None:
    """A run closed as finished keeps only whole weights: a damaged last.pt or best.pt moves to
    <name>.damaged (kept as it was, no longer a *.pt anyone loads). Returns the note that says which
    moved and which checkpoint is whole; None when both are whole (or absent)."""
    run_dir = Path(run_dir)
    said, whole = [], []
    for name in (LAST, BEST):
        path = run_dir / name
        if not path.is_file():
            continue
        found = inspect_checkpoint(path)
        if found.sound:
            whole.append(str(name))
            continue
        keep_damaged(path, path.with_name(path.name + ".damaged"))
        path.unlink()
        said.append(f"{name} is damaged ({found.damage}): kept as {name}.damaged")
    if not said:
        return None
    return "; ".join(said) + (f"; whole: {', '.join(whole)}" if whole else "; no whole checkpoint is left")


def results_epochs(run_dir: Path) -> list[int]:
    path = Path(run_dir) / RESULTS
    lines = path.read_text(errors="replace").splitlines()[1:] if path.is_file() else []
    return [e for e in map(row_epoch, lines) if e is not None]


def rewind_results(run_dir: Path, epochs: int) -> None:
    """Keep results.csv's rows up to `epochs`; the later ones go to results.rewound.csv (appended, so
    nothing a user had is gone)."""
    path = run_dir / RESULTS
    if not path.is_file():
        return
    header, *rows = path.read_text(errors="replace").splitlines(keepends=True)
    moved = [row for row in rows if (row_epoch(row) or 0) > epochs]
    if moved:
        rewound = run_dir / REWOUND_RESULTS
        old = rewound.read_text(errors="replace") if rewound.is_file() else header
        write_text_atomic(rewound, old + "".join(moved))
        write_text_atomic(path, header + "".join(row for row in rows if (row_epoch(row) or 0) <= epochs))
