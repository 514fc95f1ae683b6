"""Files a user names: read with a bound and never blocked by a FIFO; written whole, never through a
device, a FIFO or a symbolic link, and never over an existing file unless the user asked (--force).

CI and many containers run as root, where nothing stops `open("/dev/null", "w")` or a rename over a
device node: these checks are the only guard."""

from __future__ import annotations

import os
import select
import stat
import time
from pathlib import Path

from orchestrator.rundir import write_text_atomic
from orchestrator.errors import UserError

NAME_MAX = 255  # bytes in one path component (Linux, macOS)
PIPE_WAIT_S = 10.0  # how long a FIFO or pipe may stay silent before it is called writerless


def too_long_component(path: str | os.PathLike) -> str | None:
    """The first component of `path` longer than the filesystem allows (else None): a path of it
    makes open() and stat() raise ENAMETOOLONG, which is named here instead."""
    for part in Path(path).parts:
        if len(part.encode("utf-8", "surrogateescape")) > NAME_MAX:
            return part
    return None


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def read_regular_bounded(path: str, limit: int) -> tuple[bytes | None, str | None]:
    """(at most `limit` + 1 bytes, None) of a regular file, or (None, why not): a FIFO, a device or
    a socket is never read (opening with O_NONBLOCK: a FIFO with no writer cannot block here)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        return None, exc.strerror or str(exc)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            return None, f"{_kind(mode)}, not a regular file"
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit + 1), None
    finally:
        os.close(fd)


def read_stream_bounded(path: Path, limit: int, wait_s: float = PIPE_WAIT_S) -> bytes:
    """Read a file, a pipe (`<(...)`) or a FIFO up to `limit` + 1 bytes; a FIFO or pipe that sends
    nothing for `wait_s` seconds raises TimeoutError (no writer: open() would block forever)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            with os.fdopen(fd, "rb", closefd=False) as f:
                return f.read(limit + 1)
        chunks, size, deadline = [], 0, time.monotonic() + wait_s
        while size <= limit:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError
            try:
                chunk = os.read(fd, min(1 << 16, limit + 1 - size))
            except BlockingIOError:
                continue
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            deadline = time.monotonic() + wait_s
        return b"".join(chunks)
    finally:
        os.close(fd)


def output_problem(path: Path, force: bool) -> str | None:
    """Why `path` may not be written as a new file (None: it may). Never through a link, a device,
    a FIFO or a socket (even with --force); an existing file only with --force."""
    name = too_long_component(path)
    if name is not None:
        return f"has a name longer than {NAME_MAX} bytes ('{name[:40]}...')"
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        parent = path.parent
        if not parent.is_dir():
            return f"cannot be made: its folder {parent} does not exist" if not parent.exists() else \
                f"cannot be made: {parent} is not a folder"
        return None
    except OSError as exc:
        return f"cannot be checked ({exc.strerror or exc})"
    if stat.S_ISLNK(mode):
        return "is a symbolic link; yolo-orch never writes through one"
    if stat.S_ISDIR(mode):
        return "is a directory; give a file name"
    if not stat.S_ISREG(mode):
        return f"is {_kind(mode)}; yolo-orch writes only regular files"
    if not force:
        return "exists; pass --force to replace it"
    return None


def check_output_file(path: Path, flag: str, force: bool = False) -> None:
    """`output_problem` as one UserError line naming `flag`."""
    why = output_problem(Path(path), force)
    if why:
        raise UserError(f"{flag}: {path} {why}")


def write_output_file(path: Path, text: str, flag: str, force: bool = False) -> None:
    """Write `text` to `path` whole (a temporary file renamed over it) after `check_output_file`;
    a refusal writes nothing."""
    path = Path(path)
    check_output_file(path, flag, force)
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise UserError(f"{flag}: cannot write {path} ({exc.strerror or exc})") from None
