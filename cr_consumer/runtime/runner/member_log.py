"""Why a member stopped, read from its log: the last ERROR line.

The supervisor (``supervisor.py``) logs it when it restarts a member and puts it
into the region's ``failed`` reason when a member's exit is final, so the cause
reaches the console instead of staying in ``<state_dir>/logs/<member>.log``.
Both log formats of ``coordinator.protocol.common.logging_setup`` are read (text, JSON lines).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

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
