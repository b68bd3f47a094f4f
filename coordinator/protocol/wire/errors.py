"""Error codes of the coordinator protocol and the exceptions that carry them.

The same classes are used on both sides of the wire:

* on the server, a handler raises a :class:`CoordinatorError` subclass and the
  server turns it into an error reply ``{"type": "error", "body": {"code":
  CODE, "message": TEXT}}`` for the request that caused it;
* on the client, an error reply is turned back into the matching subclass
  (:func:`error_for_code`), so callers can ``except CrIndexMismatch`` or look
  at ``.code``.

:class:`CoordinatorUnavailable` is different: it is raised by the client only,
when no usable reply arrived before the caller's deadline (the process is down,
unreachable, refuses our CURVE key, or is still loading its state).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from typing import Any

from coordinator.protocol.common.endpoints import check_endpoint

log = logging.getLogger(__name__)


class ErrorCode(str, enum.Enum):
    """Codes of error replies. The string value is what travels on the wire."""

    #: Not one JSON object with v/id/type/body, an empty or multi-frame message.
    MALFORMED = "MALFORMED"
    #: Envelope version the server does not speak.
    UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"
    #: No handler for the message type.
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    #: A field is missing, has the wrong type, or an impossible value.
    INVALID = "INVALID"
    #: A member registered with a different consistent-region index than the group's.
    CR_INDEX_MISMATCH = "CR_INDEX_MISMATCH"
    #: The group, or the operator name within it, is not registered.
    NOT_REGISTERED = "NOT_REGISTERED"
    #: The server is still replaying its log (or a standby that knows no leader); retry with backoff.
    LOAD_IN_PROGRESS = "LOAD_IN_PROGRESS"
    #: A standby that knows the leader: the body's ``leader`` names its endpoint; the
    #: client re-sends the same request there.
    NOT_LEADER = "NOT_LEADER"
    #: This server stops: its log refused the write (fenced by a newer leader, or failed), so
    #: nothing of the request was acknowledged; re-send it (the same request id), to the next
    #: endpoint when there are several.
    UNAVAILABLE = "UNAVAILABLE"
    #: The frame is larger than the server's maximum; it was not parsed.
    TOO_LARGE = "TOO_LARGE"
    #: A wait inside the server (a checkpoint merge) ran past its timeout.
    TIMEOUT = "TIMEOUT"
    #: The merge was dropped by retire_checkpoint (its sequence id <= the retired id).
    RETIRED = "RETIRED"
    #: A configured resource limit (groups, members per group, control variables
    #: per group, regions, pending merges and their bytes) would be exceeded;
    #: nothing was changed. The message names the limit and its value.
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    #: The merge completed without this contributor (it is not among the names
    #: its map covers); the caller resets again with a new attempt.
    MERGE_CLOSED = "MERGE_CLOSED"
    #: An unexpected failure inside the server (logged there with its traceback).
    INTERNAL = "INTERNAL"


class CoordinatorError(Exception):
    """An error reply from the coordinator (or a request rejected before sending)."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str, *, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code.value}: {self.message}"


class Malformed(CoordinatorError):
    code = ErrorCode.MALFORMED


class UnsupportedVersion(CoordinatorError):
    code = ErrorCode.UNSUPPORTED_VERSION


class UnknownType(CoordinatorError):
    code = ErrorCode.UNKNOWN_TYPE


class Invalid(CoordinatorError):
    code = ErrorCode.INVALID


class CrIndexMismatch(CoordinatorError):
    code = ErrorCode.CR_INDEX_MISMATCH


class NotRegistered(CoordinatorError):
    code = ErrorCode.NOT_REGISTERED


class LoadInProgress(CoordinatorError):
    code = ErrorCode.LOAD_IN_PROGRESS


class NotLeader(CoordinatorError):
    """``leader``: the endpoint the reply named, checked (None: absent or unusable)."""

    code = ErrorCode.NOT_LEADER

    def __init__(self, message: str, *, leader: str | None = None) -> None:
        super().__init__(message)
        self.leader = leader


class Unavailable(LoadInProgress):
    """Handled as LOAD_IN_PROGRESS (retried with backoff, the next endpoint first)."""

    code = ErrorCode.UNAVAILABLE


class TooLarge(CoordinatorError):
    code = ErrorCode.TOO_LARGE


class MergeTimeout(CoordinatorError):
    code = ErrorCode.TIMEOUT


class MergeRetired(CoordinatorError):
    code = ErrorCode.RETIRED


class LimitExceeded(CoordinatorError):
    code = ErrorCode.LIMIT_EXCEEDED


class MergeClosed(CoordinatorError):
    code = ErrorCode.MERGE_CLOSED


class InternalError(CoordinatorError):
    code = ErrorCode.INTERNAL


_BY_CODE: dict[ErrorCode, type[CoordinatorError]] = {
    cls.code: cls
    for cls in (
        Malformed,
        UnsupportedVersion,
        UnknownType,
        Invalid,
        CrIndexMismatch,
        NotRegistered,
        LoadInProgress,
        NotLeader,
        Unavailable,
        TooLarge,
        MergeTimeout,
        MergeRetired,
        LimitExceeded,
        MergeClosed,
        InternalError,
    )
}


def leader_of(body: Mapping[str, Any]) -> str | None:
    """The endpoint a NOT_LEADER reply's body names, checked like a configured endpoint
    (``coordinator.protocol.common.endpoints.check_endpoint``); None when it is absent or
    unusable (logged): the reply then counts as LOAD_IN_PROGRESS."""
    raw = body.get("leader")
    try:
        return check_endpoint(raw)
    except ValueError as exc:
        log.warning("a NOT_LEADER reply named no usable leader: %s", exc)
        return None


def error_for_code(code: str, message: str, body: Mapping[str, Any] | None = None) -> CoordinatorError:
    """The exception for an error reply (``body``: the whole reply body, for NOT_LEADER's
    ``leader``); an unknown code gives a plain CoordinatorError."""
    try:
        ec = ErrorCode(code)
    except ValueError:
        err = CoordinatorError(f"(unknown code {code!r}) {message}")
        return err
    if ec is ErrorCode.NOT_LEADER:
        leader = leader_of(body or {})
        return NotLeader(message, leader=leader) if leader is not None else LoadInProgress(message)
    return _BY_CODE[ec](message)


class CoordinatorUnavailable(Exception):
    """No usable reply from the coordinator before the caller's deadline; ``loading``: the last
    answer was LOAD_IN_PROGRESS (a coordinator replaying its log, or a standby)."""

    def __init__(self, message: str, *, endpoint: str | None = None, loading: bool = False) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.loading = loading
