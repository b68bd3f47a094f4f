"""The flags of a coordinator process whose log is on Kafka, as the standby and split-brain
tests start it (``cr-coordinator --state kafka``, docs/durable-state.md)."""

from __future__ import annotations

#: The lease the tests give their leaders: a standby takes over after this long without a write.
LEASE_S = 2.0
#: Bound of one group commit: a paused leader's write, resumed after the lease, fails at once.
WRITE_TIMEOUT = "3s"


def kafka_log_args(bootstrap: str, topic: str, lease_s: float = LEASE_S) -> list[str]:
    """``cr-coordinator`` arguments for a log on ``topic`` of the cluster at ``bootstrap``."""
    return [
        "--state",
        "kafka",
        "--kafka-bootstrap",
        bootstrap,
        "--log-topic",
        topic,
        "--log-lease",
        f"{lease_s:g}s",
        "--log-write-timeout",
        WRITE_TIMEOUT,
    ]
