"""One supervised member process of a region runner, its restart backoff, and
why it stopped.

The runner's supervisor (``supervisor.MemberSupervisor``) keeps one
:class:`MemberProc` per member name. When it first sees the process dead it
calls :meth:`MemberProc.schedule_restart`, then starts the member again once
``next_start`` has passed:

1. The first death since a start that was not itself a quick restart is
   restarted at once: a kill -9 must not add a delay to recovery.
2. A member that dies again within :data:`RESTART_WINDOW_S` of its restart
   waits :data:`RESTART_FIRST_S`, doubling while it keeps dying (no hot restart
   loop), up to :data:`RESTART_MAX_S` (``coordinator.protocol.common.backoff.Backoff``:
   each quick death is a failure, a death after a stable run a success).

Why a member stopped is the last ERROR line of its log (:func:`last_error`,
both formats of ``coordinator.protocol.common.logging_setup``: text, JSON
lines): the supervisor logs it with a restart and puts it into the region's
``failed`` reason when a member's exit is final, so the cause reaches the
console instead of staying in ``<state_dir>/logs/<member>.log``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from pathlib import Path
from typing import BinaryIO

import attrs

from coordinator.protocol.common.backoff import Backoff

#: Restart delay of a member's first death: none.
RESTART_MIN_S = 0.0
#: Restart delay of the first death within RESTART_WINDOW_S of a restart.
RESTART_FIRST_S = 0.2
#: Longest restart delay of a member that keeps dying: once the cause is gone (a
#: broker back up), it is running again within this long.
RESTART_MAX_S = 5.0
#: A death within this long of the last (re)start counts as "keeps dying".
RESTART_WINDOW_S = 10.0


@attrs.define
class MemberProc:
    name: str
    proc: subprocess.Popen[bytes] | None = None
    log_file: BinaryIO | None = None  # the member's log, open while its process may write to it
    restarts: int = 0
    last_start: float = 0.0
    next_start: float = 0.0
    delay: float = RESTART_MIN_S  # of the last scheduled restart
    removed: bool = False
    exit_codes: list[int] = attrs.field(factory=list)
    #: Quick deaths in a row (step 2); a death after a stable run starts over.
    backoff: Backoff = attrs.field(factory=lambda: Backoff(RESTART_FIRST_S, RESTART_MAX_S))

    def schedule_restart(self, now: float) -> float:
        """Set ``next_start`` after a death seen at ``now`` (monotonic); returns the delay."""
        quick = self.restarts > 0 and now - self.last_start < RESTART_WINDOW_S
        if quick:
            self.delay = self.backoff.failed(now)
        else:
            self.backoff.succeeded()
            self.delay = RESTART_MIN_S
        self.next_start = now + self.delay
        return self.delay


log = logging.getLogger(__name__)

#: Bytes read back from the end of a member's log to find its last ERROR line
#: (bounds the read of a log that grew for days).
LOG_TAIL_BYTES = 64 * 1024
#: The member's own loggers: their ERROR records state why it stopped.
MEMBER_LOGGERS = frozenset(
    {"cr_consumer.runtime.member.process", "cr_consumer.runtime.member.executor", "__main__", "cr_consumer.cli.member"}
)
#: Longest error line echoed (the rest of a long line stays in the log).
MAX_ECHO_CHARS = 500


def last_error(path: Path) -> str | None:
    """The message of the last ERROR (or CRITICAL) record in the log at ``path``,
    read from its last :data:`LOG_TAIL_BYTES`. A record of the member's own
    loggers (:data:`MEMBER_LOGGERS`, which name the cause and the address) wins
    over a later one of its threads or libraries. None: no such record, or the
    log is unreadable (logged)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError as exc:
        log.warning("cannot read the member log %s: %s", path, exc)
        return None
    errors = [e for e in map(error_record, lines) if e is not None]
    own = [message for logger, message in errors if logger in MEMBER_LOGGERS]
    if own or errors:
        return (own or [errors[-1][1]])[-1][:MAX_ECHO_CHARS]
    return None


def error_record(line: str) -> tuple[str, str] | None:
    """(logger, message) of one log line when it is an ERROR/CRITICAL record, else None."""
    if line.startswith("{"):
        try:
            doc = json.loads(line)
        except ValueError:
            return None
        if isinstance(doc, dict) and doc.get("level") in ("ERROR", "CRITICAL"):
            return str(doc.get("logger", "")), str(doc.get("msg", ""))
        return None
    for level in (" ERROR ", " CRITICAL "):
        head, sep, tail = line.partition(level)
        if sep and head[:4].isdigit():  # "<asctime> ERROR <logger> [<thread>] <message>"
            logger, _, rest = tail.partition(" ")
            return logger, rest.partition("] ")[2] or rest
    return None


__all__ = [
    "RESTART_FIRST_S",
    "RESTART_MAX_S",
    "RESTART_MIN_S",
    "RESTART_WINDOW_S",
    "MemberProc",
    "error_record",
    "last_error",
]
