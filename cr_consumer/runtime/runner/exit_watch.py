"""Waking a supervisor thread as soon as a process it supervises ends.

:class:`ExitWatch` decides how the thread waits between its rounds: on the
processes themselves where Linux gives pidfds, else a plain sleep of the
round's interval (steps in the class docstring).
"""

from __future__ import annotations

import logging
import os
import select
from collections.abc import Iterable

from coordinator.protocol.common.osutil import WakePipe

log = logging.getLogger(__name__)


class ExitWatch:
    """Wakes the supervisor thread as soon as a process it supervises ends:
    :meth:`wait` blocks in ``poll()`` on one Linux pidfd per process (readable
    once the process has ended) and on a wake pipe.

    1. The supervisor thread collects the pids of its running processes under
       its lock and calls ``wait(pids, timeout)`` outside it: it returns as soon
       as one of them ends, ``wake()`` is called (stop), or after ``timeout``.
    2. A pidfd is opened once per pid and closed when the pid is no longer
       passed (the process was reaped). A pid that cannot be opened (it ended
       and was reaped meanwhile) ends the wait at once: the caller's next check
       sees why.
    3. Without pidfds (not Linux, or a kernel before 5.3) the wait is a sleep
       of ``timeout``.

    ``wait`` runs on the supervisor thread only, ``wake`` on any thread,
    ``close`` once the thread has stopped.
    """

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}  # pid -> its pidfd
        self._wake = WakePipe()
        self._pidfds = hasattr(os, "pidfd_open")

    def wake(self) -> None:
        self._wake.wake()

    def wait(self, pids: Iterable[int], timeout: float) -> None:
        wanted = set(pids)
        for pid in set(self._fds) - wanted:
            os.close(self._fds.pop(pid))
        poller = select.poll()
        poller.register(self._wake.fileno, select.POLLIN)
        if self._pidfds:
            for pid in wanted:
                fd = self._fds.get(pid)
                if fd is None:
                    try:
                        fd = self._fds[pid] = os.pidfd_open(pid)
                    except ProcessLookupError:
                        return  # step 2: gone already
                    except OSError as exc:  # ENOSYS: an old kernel; poll on the wake pipe only from now on
                        log.info("no pidfds (%s): member exits are seen at the supervisor's next round", exc)
                        self._pidfds = False
                        break
                poller.register(fd, select.POLLIN)
        poller.poll(max(0, int(timeout * 1000)))
        self._wake.drain()

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._wake.close()
