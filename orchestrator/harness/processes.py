"""The processes a test or campaign looks for (read from /proc: Linux, as the tool's own process
identity is): those whose command line names a folder or a module, a process's descendants, and the
torchrun ranks under a launcher."""

from __future__ import annotations

import os
import signal
from pathlib import Path

PROC = Path("/proc")


def command_line(pid: int) -> str | None:
    """The process's command line, None when it is gone or a zombie (nothing left to stop)."""
    try:
        if (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return None
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, IndexError):
        return None


def _parent(pid: int) -> int | None:
    try:
        return int((PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _ancestors_and_self() -> set[int]:
    out, pid = set(), os.getpid()
    while pid and pid not in out:
        out.add(pid)
        pid = _parent(pid)
    return out


def processes_naming(text: str) -> list[int]:
    """Live processes whose command line contains `text` (a run folder, a module), but this one and its
    parents (whose command lines may name the same folder)."""
    mine, found = _ancestors_and_self(), []
    for entry in PROC.iterdir():
        if entry.name.isdigit() and int(entry.name) not in mine:
            cmdline = command_line(int(entry.name))
            if cmdline is not None and text in cmdline:
                found.append(int(entry.name))
    return found


def children(pid: int) -> list[int]:
    """Every live descendant of `pid`."""
    parents = {int(e.name): _parent(int(e.name)) for e in PROC.iterdir() if e.name.isdigit()}
    out, frontier = [], [pid]
    while frontier:
        kids = [c for c, p in parents.items() if p in frontier and c not in out]
        out += kids
        frontier = kids
    return [c for c in out if command_line(c) is not None]


def descendants_running(pid: int, module: str) -> list[int]:
    """The descendants of `pid` whose command line names `module`."""
    return [kid for kid in children(pid) if module in (command_line(kid) or "")]


def ranks_of(launcher_pid: int) -> list[int]:
    """The torchrun ranks (processes running orchestrator.worker.ddp) under the launcher."""
    return descendants_running(launcher_pid, "orchestrator.worker.ddp")


def signal_pid(pid: int | None, sig: int = signal.SIGKILL) -> None:
    """`sig` to `pid` when it still runs."""
    if pid:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
