"""The hand-over of an identity to a standby member process: one versioned JSON
line on the standby's stdin (``standby.py`` writes it, ``cr_consumer.cli.standby``
reads it).

1. The runner writes ``{"v": 1, "argv": [...], "log": "<path>"}`` and a newline
   in one ``write``: ``argv`` is the ``crkafka member`` argument list the member
   would have been started with (without ``python -m cr_consumer.cli.member``),
   ``log`` the member's log file.
2. When the member reads Kafka properties from stdin (``--kafka-stdin`` in
   ``argv``), their document (``properties.encode_for_stdin``) follows the line
   on the same stream, unchanged; then the runner closes the stream.
3. The standby decodes the line (:func:`decode`: every field checked, the size
   bounded), points its stdout and stderr at ``log`` and runs ``crkafka member``
   with ``argv``. A line it cannot decode makes it exit with ExitCode.CONFIG
   (the runner's supervisor sees a final exit and says why in ``failed``).

The runner writes both without blocking and within a bound
(``standby.HANDOFF_WRITE_TIMEOUT_S``): a standby that does not read them (stopped,
wedged) is killed and the member started cold, so a hand-over never waits
longer than a cold start would.
"""

from __future__ import annotations

import json

import attrs

HANDOFF_VERSION = 1
#: Longest hand-over line: a member's command line is a few hundred bytes; this
#: bounds what a standby reads before it has checked anything.
MAX_HANDOFF_BYTES = 32 * 1024
#: Most arguments in ``argv`` (a region with many ``--param`` items stays far below).
MAX_ARGS = 1000


class HandoffError(ValueError):
    """A hand-over line that is not a valid version-1 document."""


@attrs.frozen
class Handoff:
    #: ``crkafka member`` arguments of the identity handed over.
    argv: tuple[str, ...]
    #: The member's log file: the standby's stdout and stderr from now on.
    log: str

    def encode(self) -> bytes:
        line = json.dumps({"v": HANDOFF_VERSION, "argv": list(self.argv), "log": self.log},
                          separators=(",", ":")).encode() + b"\n"
        if len(line) > MAX_HANDOFF_BYTES or len(self.argv) > MAX_ARGS:
            raise HandoffError(f"hand-over too large ({len(line)} bytes, {len(self.argv)} arguments; at most "
                               f"{MAX_HANDOFF_BYTES} bytes and {MAX_ARGS} arguments)")
        return line


def decode(line: bytes) -> Handoff:
    """The standby's side of :meth:`Handoff.encode`; HandoffError for anything else."""
    if len(line) > MAX_HANDOFF_BYTES:
        raise HandoffError(f"hand-over line longer than {MAX_HANDOFF_BYTES} bytes")
    if not line.endswith(b"\n"):
        raise HandoffError("hand-over line not terminated (the runner closed the stream mid-line)")
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise HandoffError(f"hand-over line is not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("v") != HANDOFF_VERSION:
        raise HandoffError(f"hand-over: expected a version-{HANDOFF_VERSION} object, got "
                           f"{type(doc).__name__} v={doc.get('v') if isinstance(doc, dict) else None!r}")
    if set(doc) != {"v", "argv", "log"}:
        raise HandoffError(f"hand-over: fields {sorted(doc)}, expected ['argv', 'log', 'v']")
    argv, log = doc["argv"], doc["log"]
    if not isinstance(argv, list) or not argv or len(argv) > MAX_ARGS or not all(isinstance(a, str) for a in argv):
        raise HandoffError(f"hand-over: argv must be 1..{MAX_ARGS} strings")
    if not isinstance(log, str) or not log or "\0" in log:
        raise HandoffError("hand-over: log must be a non-empty path")
    return Handoff(argv=tuple(argv), log=log)
