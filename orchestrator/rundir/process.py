"""Process identity and lifetime, without psutil or torch: this process's rank, whether a process is
still the one that was recorded (boot id + start time from /proc), and dying with a parent."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Ranks:
    """Where this training process stands among its torchrun peers, read once from torchrun's environment
    (`Ranks.here()`): global and local rank (-1 and 0 alone), world and node sizes, the node's rank."""

    rank: int = -1
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    node_rank: int = 0

    @classmethod
    def here(cls) -> Ranks:
        env = os.environ
        world = int(env.get("WORLD_SIZE", 1))
        return cls(rank=int(env.get("RANK", -1)), local_rank=int(env.get("LOCAL_RANK", 0)), world_size=world,
                   local_world_size=int(env.get("LOCAL_WORLD_SIZE", world)), node_rank=int(env.get("GROUP_RANK", 0)))

    @property
    def under_torchrun(self) -> bool:
        return "RANK" in os.environ and "WORLD_SIZE" in os.environ

    @property
    def primary(self) -> bool:
        """Global rank 0, or the only process: it writes the events, the summary and the weights."""
        return self.rank in (-1, 0)

    @property
    def spans_nodes(self) -> bool:
        """More ranks than this node runs: a multi-node run."""
        return self.world_size > self.local_world_size


def rank() -> int:
    """This training process's rank: -1 alone, 0 the primary of several (it writes the events)."""
    return Ranks.here().rank


def is_primary() -> bool:
    return Ranks.here().primary


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_identity(pid: int | None) -> str | None:
    """A string that names one process for its lifetime: boot id + start time (Linux /proc);
    None when the process does not exist. Elsewhere: psutil's create_time when installed,
    else the bare PID (liveness only)."""
    if not pid or pid <= 0:
        return None
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            text = stat.read_text()
        except OSError:
            return None
        # comm may contain spaces and parentheses: fields start after the last ')'
        fields = text[text.rfind(")") + 2:].split()
        if fields and fields[0] in ("Z", "X"):  # zombie / dead: no longer running
            return None
        return f"{_boot_id()}:{fields[19]}"  # field 22 of stat: starttime in clock ticks since boot
    try:
        import psutil  # type: ignore

        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return f"psutil:{p.create_time():.3f}"
    except ImportError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return f"pid:{pid}"
    except Exception:  # psutil.NoSuchProcess and friends
        return None


def process_alive(pid: int | None, identity: str | None) -> bool:
    """True when `pid` still runs AND is the same process that was recorded (not a reused PID)."""
    current = process_identity(pid)
    if current is None:
        return False
    return identity is None or current == identity


def die_with_parent(sig: int) -> bool:
    """Linux: the kernel sends this process `sig` when its parent ends (PR_SET_PDEATHSIG), even when
    the parent is killed by SIGKILL. Whether that was armed: elsewhere it is a no-op and callers that
    must not outlive their parent poll for it."""
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    try:
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0) != 0:  # 1 = PR_SET_PDEATHSIG
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), sig)
    return True
