"""A run's life: its states and the moves between them, as data. `Registry.move` is the one writer of a run's
state and refuses any move this table does not hold; docs/architecture.md shows the same table (a test keeps
the two equal), and the registry's tests try every pair of states against it.

A run is created `queued`. The supervising process moves it `running` for each attempt of its training process
(an OOM restart or a Kaggle session is another attempt: running -> running), then to how that attempt ended. A
resume claims a stopped run back to `queued`, and hands it back as it was when the claim is abandoned. A run
stopped after every epoch was recorded (during the final validation) is closed `finished` without training. A
sweep trial whose training finished cleanly is then recorded `pruned` when the sweep pruned it at an epoch's report.
"""

from __future__ import annotations

from enum import Enum


class RunState(str, Enum):
    """Equal to its word (a str), as the registry's `state` column, summary.json and the CLI's --state spell it."""

    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    KILLED = "killed"
    STALLED = "stalled"
    PRUNED = "pruned"

    def __str__(self) -> str:  # the word, on every Python (3.10's str-mixed Enum prints its name)
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


Q, R, FIN, FAIL, K, ST, P = (RunState.QUEUED, RunState.RUNNING, RunState.FINISHED, RunState.FAILED, RunState.KILLED,
                             RunState.STALLED, RunState.PRUNED)

# from -> (to, why): every legal move and the one reason it happens
MOVES: dict[RunState, dict[RunState, str]] = {
    Q: {R: "its training process starts",
        K: "a resume's claim handed back; stopped (Ctrl-C) or its process vanished before training started",
        FAIL: "a resume's claim handed back",
        ST: "a resume's claim handed back",
        FIN: "its process vanished after the training process had finished it"},
    R: {R: "another attempt starts (an OOM restart, the next Kaggle session or Slurm job, a Ray run re-planned "
            "for the nodes a lost one left)",
        FIN: "its training process finished every epoch",
        FAIL: "its training process failed",
        K: "stopped (Ctrl-C, kill, a Slurm requeue) or its process vanished",
        ST: "the watchdog saw no rank advance for stall_timeout"},
    FIN: {P: "the sweep pruned its trial, whose training ended cleanly at the pruned epoch"},
    FAIL: {Q: "a resume claims it", FIN: "closed: every epoch was recorded before it stopped"},
    K: {Q: "a resume claims it", FIN: "closed: every epoch was recorded before it stopped"},
    ST: {Q: "a resume claims it", FIN: "closed: every epoch was recorded before it stopped"},
    P: {},
}

ACTIVE: tuple[RunState, ...] = (Q, R)  # a process owns the run (the registry checks that it is alive)
RESUMABLE: tuple[RunState, ...] = (K, FAIL, ST)  # what `yolo-orch resume` continues: the states a claim moves from
ENDED: tuple[RunState, ...] = tuple(s for s in RunState if s not in ACTIVE)


class IllegalMove(ValueError):
    """A move the table does not hold: a bug in its caller, never a user's doing (a user's run that cannot be
    resumed is refused by resume's own checks, with the fix, before any move)."""


def is_legal(frm: str, to: str) -> bool:
    return RunState(to) in MOVES[RunState(frm)]


def check_move(frm: str, to: str) -> None:
    if not is_legal(frm, to):
        allowed = ", ".join(MOVES[RunState(frm)]) or "nothing: it is final"
        raise IllegalMove(f"a run cannot move from {frm} to {to} (from {frm}: {allowed})")


def moves_table() -> list[tuple[str, str, str]]:
    """(from, to, why) for every legal move, in the table's order: what docs/architecture.md shows."""
    return [(str(frm), str(to), why) for frm, tos in MOVES.items() for to, why in tos.items()]
