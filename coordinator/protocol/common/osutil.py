"""Small operating-system helpers shared by the coordinator and the consumer side.

This module is the lowest layer: it imports nothing from ``coordinator`` or
``cr_consumer``, so the durable log, the pipeline sinks, the launchers and the
test broker can all use it without importing each other.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["WakePipe", "die_with_parent_preexec", "free_port", "fsync_dir"]


def fsync_dir(path: Path) -> None:
    """fsync the directory ``path``, so that a create, rename or unlink in it is durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def die_with_parent_preexec() -> Callable[[], None] | None:
    """A ``preexec_fn`` so that Linux sends the child SIGTERM when its parent dies
    (``PR_SET_PDEATHSIG``): a killed test run or runner leaves no process behind.

    Returns None unless called on the main thread (the signal fires when the
    spawning *thread* exits, which would kill children of short-lived threads),
    or where libc has no prctl. libc is loaded here, in the parent, so that the
    child only makes one foreign call between fork and exec (no imports, no locks).
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux/glibc: children outlive a killed owner
        return None
    sigterm = int(signal.SIGTERM)

    def set_pdeathsig() -> None:
        prctl(1, sigterm)  # 1 = PR_SET_PDEATHSIG

    return set_pdeathsig


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that is free on ``host`` right now."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class WakePipe:
    """A non-blocking pipe that wakes a thread blocked in poll() on `fileno`.

    1. The polling thread registers `fileno` (the read end) with its poller.
    2. Any thread calls `wake()`: one byte is written; a full pipe means a
       wake-up is pending already, and a closed one that the owner is shutting
       down, so neither is an error.
    3. The polling thread, woken, calls `drain()` before it looks for work.
    4. The owner calls `close()` once the polling thread has stopped.
    """

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)

    @property
    def fileno(self) -> int:
        return self._r

    def wake(self) -> None:
        with contextlib.suppress(OSError):  # BlockingIOError: a wake-up is pending; EBADF: closed at shutdown
            os.write(self._w, b"x")

    def drain(self) -> None:
        try:
            while os.read(self._r, 4096):
                pass
        except BlockingIOError:  # empty: every pending wake-up is consumed
            pass

    def close(self) -> None:
        for fd in (self._r, self._w):
            # EBADF: closed already (close() is idempotent); nothing else can fail here
            with contextlib.suppress(OSError):
                os.close(fd)
        self._r = self._w = -1
