"""The hand-over of an identity to a standby member process, both directions:
the hand-over line the runner writes on the standby's stdin, and the status
lines the standby answers with on its status pipe (``--status-fd``). Both are
one versioned JSON object per line (``standby_proc.py`` is the runner's side,
``cr_consumer.cli.standby`` the standby's).

1. The standby, its imports done, writes ``{"v": 1, "status": "ready"}`` on
   its status pipe. Until then the runner hands it nothing.
2. The runner writes ``{"v": 1, "argv": [...], "log": "<path>"}`` and a newline
   in one ``write``: ``argv`` is the ``crkafka member`` argument list the member
   would have been started with (without ``python -m cr_consumer.cli.member``),
   ``log`` the member's log file.
3. When the member reads Kafka properties from stdin (``--kafka-stdin`` in
   ``argv``), their document (``properties.encode_for_stdin``) follows the line
   on the same stream, unchanged; then the runner closes the stream.
4. The standby decodes the line (:func:`decode`: every field checked, the size
   bounded) and points its stdout and stderr at ``log``. Then it answers
   ``{"v": 1, "status": "took", "detail": "<member name>"}``, closes the status
   pipe and runs ``crkafka member`` with ``argv``: from here on it is that
   member. A line it cannot decode, or a log it cannot open, makes it answer
   ``{"v": 1, "status": "refused", "detail": "<why>"}`` and exit with
   ExitCode.CONFIG; the runner logs why and starts the member cold.
"""

from __future__ import annotations

import enum
import json

import attrs

HANDOFF_VERSION = 1
#: Longest hand-over line: a member's command line is a few hundred bytes; this
#: bounds what a standby reads before it has checked anything.
MAX_HANDOFF_BYTES = 32 * 1024
#: Most arguments in ``argv`` (a region with many ``--param`` items stays far below).
MAX_ARGS = 1000
#: Longest status line (a refusal's reason included): bounds what the runner
#: buffers from a standby's status pipe.
MAX_STATUS_BYTES = 4096
#: Longest ``detail`` a standby sends (cut, not refused: it is only logged).
MAX_DETAIL_CHARS = 1000


class HandoffError(ValueError):
    """A hand-over or status line that is not a valid version-1 document."""


@attrs.frozen
class Handoff:
    #: ``crkafka member`` arguments of the identity handed over.
    argv: tuple[str, ...]
    #: The member's log file: the standby's stdout and stderr from now on.
    log: str

    def encode(self) -> bytes:
        line = (
            json.dumps({"v": HANDOFF_VERSION, "argv": list(self.argv), "log": self.log}, separators=(",", ":")).encode()
            + b"\n"
        )
        if len(line) > MAX_HANDOFF_BYTES or len(self.argv) > MAX_ARGS:
            raise HandoffError(
                f"hand-over too large ({len(line)} bytes, {len(self.argv)} arguments; at most "
                f"{MAX_HANDOFF_BYTES} bytes and {MAX_ARGS} arguments)"
            )
        return line

    @property
    def member(self) -> str:
        """The ``--name`` in ``argv`` ("?" without one): for the logs."""
        argv = self.argv
        return argv[argv.index("--name") + 1] if "--name" in argv[:-1] else "?"


def _object(line: bytes, limit: int, what: str) -> dict[str, object]:
    if len(line) > limit:
        raise HandoffError(f"{what} line longer than {limit} bytes")
    if not line.endswith(b"\n"):
        raise HandoffError(f"{what} line not terminated (the stream closed mid-line)")
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise HandoffError(f"{what} line is not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("v") != HANDOFF_VERSION:
        raise HandoffError(
            f"{what}: expected a version-{HANDOFF_VERSION} object, got "
            f"{type(doc).__name__} v={doc.get('v') if isinstance(doc, dict) else None!r}"
        )
    return doc


def decode(line: bytes) -> Handoff:
    """The standby's side of :meth:`Handoff.encode`; HandoffError for anything else."""
    doc = _object(line, MAX_HANDOFF_BYTES, "hand-over")
    if set(doc) != {"v", "argv", "log"}:
        raise HandoffError(f"hand-over: fields {sorted(doc)}, expected ['argv', 'log', 'v']")
    argv, log = doc["argv"], doc["log"]
    if not isinstance(argv, list) or not argv or len(argv) > MAX_ARGS or not all(isinstance(a, str) for a in argv):
        raise HandoffError(f"hand-over: argv must be 1..{MAX_ARGS} strings")
    if not isinstance(log, str) or not log or "\0" in log:
        raise HandoffError("hand-over: log must be a non-empty path")
    return Handoff(argv=tuple(argv), log=log)


class Status(enum.Enum):
    """What a standby says on its status pipe (steps 1 and 4)."""

    READY = "ready"
    TOOK = "took"
    REFUSED = "refused"


@attrs.frozen
class StatusLine:
    status: Status
    #: TOOK: the member's name; REFUSED: why; READY: empty.
    detail: str = ""

    def encode(self) -> bytes:
        doc: dict[str, object] = {"v": HANDOFF_VERSION, "status": self.status.value}
        if self.detail:
            doc["detail"] = self.detail[:MAX_DETAIL_CHARS]
        return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def decode_status(line: bytes) -> StatusLine:
    """The runner's side of :meth:`StatusLine.encode`; HandoffError for anything else."""
    doc = _object(line, MAX_STATUS_BYTES, "status")
    if not set(doc) <= {"v", "status", "detail"}:
        raise HandoffError(f"status: fields {sorted(doc)}, expected ['detail', 'status', 'v']")
    try:
        status = Status(doc.get("status"))
    except ValueError:
        raise HandoffError(f"status: unknown status {doc.get('status')!r}") from None
    detail = doc.get("detail", "")
    if not isinstance(detail, str) or len(detail) > MAX_DETAIL_CHARS:
        raise HandoffError(f"status: detail must be a string of at most {MAX_DETAIL_CHARS} characters")
    return StatusLine(status, detail)
