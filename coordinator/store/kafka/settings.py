"""Where the Kafka log lives and how it is written: `KafkaLogSettings`, validated whole.

Names derived from the log topic ``T``:

- ``T``: the log, one record per request (one partition);
- ``T.snapshots``: the snapshots of the tables (one partition);
- consumer group ``T.snapshot``: its committed offset on ``T.snapshots`` is the
  snapshot pointer (where the newest complete snapshot begins);
- transactional id ``cr-coordinator.T``: the one id every coordinator writing ``T``
  uses, so the newest writer's ``init_transactions`` fences the others.
"""

from __future__ import annotations

import math
import re

import attrs

from coordinator.store.log.frame import HEADER_SIZE

#: Defaults a production cluster needs: a write acknowledged by acks=all survives the
#: loss of one broker only when it reached at least 2 replicas of 3.
DEFAULT_REPLICATION_FACTOR = 3
DEFAULT_MIN_INSYNC_REPLICAS = 2
#: Bound on one group commit (produce + acks=all of every record of a loop
#: iteration). Past it the log fails (fail-stop): a broker that cannot take a write
#: for this long stops the coordinator instead of stalling every client for ever.
DEFAULT_WRITE_TIMEOUT_S = 10.0
#: Bound on every other broker call (metadata, topic creation, the pointer) and on a
#: replay that makes no progress: an unreachable cluster fails start-up instead of
#: hanging it in LOAD_IN_PROGRESS.
DEFAULT_CALL_TIMEOUT_S = 30.0
#: Largest Kafka record value the log writes: the topics are created with a
#: max.message.bytes a little above it. A request whose record would be larger is
#: refused (RecordTooLarge) with nothing written; the wire's default frame limit
#: (4 MiB) keeps ordinary requests below it, and batched records (snapshots,
#: expiry) are at most 1 MiB.
MAX_RECORD_VALUE_BYTES = 8 << 20
#: Largest payload (the record value minus the frame header and version byte).
MAX_PAYLOAD_BYTES = MAX_RECORD_VALUE_BYTES - HEADER_SIZE - 1
#: Topic max.message.bytes: the value plus a record batch's own overhead.
TOPIC_MAX_MESSAGE_BYTES = MAX_RECORD_VALUE_BYTES + (64 << 10)
#: How long the log may go without a write before a standby takes over. The leader
#: writes a lease record after ``lease_s / 3`` without a write, so two lost or late
#: lease records do not depose a live leader; a shorter lease fails over sooner and
#: deposes a leader that a starved machine pauses for longer than it.
DEFAULT_LEASE_S = 5.0
SNAPSHOT_TOPIC_SUFFIX = ".snapshots"
TRANSACTIONAL_ID_PREFIX = "cr-coordinator."
POINTER_GROUP_SUFFIX = ".snapshot"
# Kafka's topic name rule; the snapshot topic's name must fit the 249-character limit too.
_TOPIC_RE = re.compile(rf"^[A-Za-z0-9._-]{{1,{249 - len(SNAPSHOT_TOPIC_SUFFIX)}}}$")
_HOST_PORT_RE = re.compile(r"^[^\s,:]+:\d{1,5}$|^\[[0-9A-Fa-f:.]+\]:\d{1,5}$")


def _check_bootstrap(_inst: object, _attr: attrs.Attribute[str], value: str) -> None:
    parts = value.split(",") if isinstance(value, str) else []
    if not parts or not all(_HOST_PORT_RE.match(p) and 0 < int(p.rpartition(":")[2]) < 65536 for p in parts):
        raise ValueError(f"kafka bootstrap must be HOST:PORT[,HOST:PORT...], got {value!r}")


def _check_topic(_inst: object, _attr: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not _TOPIC_RE.match(value) or value in (".", ".."):
        raise ValueError(
            f"log topic must be 1-{249 - len(SNAPSHOT_TOPIC_SUFFIX)} characters of [A-Za-z0-9._-], got {value!r}"
        )


def _check_seconds(_inst: object, attr: attrs.Attribute[float], value: float) -> None:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 < value <= 3600:
        raise ValueError(f"{attr.name} must be a number of seconds in (0, 3600], got {value!r}")


def _check_count(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or not 1 <= value <= 32:
        raise ValueError(f"{attr.name} must be an int in [1, 32], got {value!r}")


@attrs.frozen
class KafkaLogSettings:
    """The Kafka log's place and write policy; every field checked on construction."""

    bootstrap: str = attrs.field(validator=_check_bootstrap)
    topic: str = attrs.field(validator=_check_topic)
    replication_factor: int = attrs.field(default=DEFAULT_REPLICATION_FACTOR, validator=_check_count)
    min_insync_replicas: int = attrs.field(default=DEFAULT_MIN_INSYNC_REPLICAS, validator=_check_count)
    write_timeout_s: float = attrs.field(default=DEFAULT_WRITE_TIMEOUT_S, validator=_check_seconds)
    call_timeout_s: float = attrs.field(default=DEFAULT_CALL_TIMEOUT_S, validator=_check_seconds)
    lease_s: float = attrs.field(default=DEFAULT_LEASE_S, validator=_check_seconds)

    def __attrs_post_init__(self) -> None:
        if self.min_insync_replicas > self.replication_factor:
            raise ValueError(
                f"min_insync_replicas {self.min_insync_replicas} exceeds replication_factor "
                f"{self.replication_factor}: no write could ever be acknowledged"
            )

    @property
    def snapshot_topic(self) -> str:
        return self.topic + SNAPSHOT_TOPIC_SUFFIX

    @property
    def pointer_group(self) -> str:
        return self.topic + POINTER_GROUP_SUFFIX

    @property
    def transactional_id(self) -> str:
        return TRANSACTIONAL_ID_PREFIX + self.topic

    @property
    def lease_interval_s(self) -> float:
        """The longest the leader goes without a write (`DEFAULT_LEASE_S` says why a third)."""
        return self.lease_s / 3

    @property
    def where(self) -> str:
        return f"kafka://{self.bootstrap}/{self.topic}"

    @property
    def call_timeout_ms(self) -> int:
        return int(self.call_timeout_s * 1000)
