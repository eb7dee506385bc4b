"""The capture's writer lock: ``.lock``, an ``fcntl.flock`` held while a writer has it open.

Refuses a second writer (even with ``force``); released by the kernel when the writer dies.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from rdmascope.capture.schema import LOCK_NAME, CaptureLockedError, CaptureWriteError


def _lock_pid(fd: int) -> int | None:
    """Return the pid written in a lock file (None when it holds none)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def recording_pid(path: str | os.PathLike) -> int | None:
    """Return the pid of the process recording the capture at ``path`` now, or None.

    A writer holds ``.lock`` (an exclusive ``flock``) while it runs; a killed one holds nothing.
    Tested with a non-blocking shared lock taken and dropped at once. Returns -1 when the lock
    is held but names no pid; None when the capture is not being written (or has no lock file).
    """
    lock = Path(path) / LOCK_NAME
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _lock_pid(fd)
            return pid if pid is not None else -1
        except OSError:
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _acquire_lock(p: Path, *, dir_fd: int | None = None, mode: int = 0o644) -> int:
    """Take the capture's exclusive lock (``p/.lock``, non-blocking); return its file descriptor.

    Raises ``CaptureLockedError`` (naming the holder's pid) when another open file holds it and
    ``CaptureWriteError`` when ``.lock`` is a symbolic link. The lock is an ``fcntl.flock``: the
    kernel drops it when the holder dies (kill -9 leaves no stale lock). A lock file removed by
    its holder between our open and our flock is detected (different inode) and retried.
    ``dir_fd``: the capture directory's handle (the lock is then made relative to it).
    """
    lock = p / LOCK_NAME
    where = LOCK_NAME if dir_fd is not None else lock
    while True:
        try:
            fd = os.open(where, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise CaptureWriteError(lock, "is a symbolic link; refusing to follow it") from exc
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _lock_pid(fd)
            os.close(fd)
            raise CaptureLockedError(p, pid) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            st, cur = os.fstat(fd), os.stat(where, dir_fd=dir_fd, follow_symlinks=False)
            same = (st.st_dev, st.st_ino) == (cur.st_dev, cur.st_ino)
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the previous holder removed it after our open: lock the current one
    try:
        os.fchmod(fd, mode)  # whatever the umask
        data = f"{os.getpid()}\n".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except OSError:
        pass  # the pid is a courtesy for the error message; the lock itself is held
    return fd


def _release_lock(p: Path, fd: int | None, *, dir_fd: int | None = None) -> None:
    """Remove the lock file (while still holding it) and release the lock."""
    if fd is None:
        return
    try:
        if dir_fd is not None:
            os.unlink(LOCK_NAME, dir_fd=dir_fd)
        else:
            (p / LOCK_NAME).unlink(missing_ok=True)
    except OSError:
        pass
    try:
        os.close(fd)
    except OSError:
        pass
