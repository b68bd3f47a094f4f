"""The Kafka properties (dotted names) of the query's clients: each group member's
(:class:`~cr_consumer.spark.membership.GroupMember`, with its name), and those of
a client outside the group (the executors' range reads and the planner's
watermark probe: assign and seek, no group)."""

from __future__ import annotations

from cr_consumer.spark.options import SourceOptions
from cr_consumer.spark.options.kafka_properties import MEMBER_SESSION_TIMEOUT_MS


def member_name(i: int) -> str:
    return f"crkafka-{i}"


def session_timeout_ms(options: SourceOptions) -> int:
    """The members' session timeout: ``kafka.session.timeout.ms``, else MEMBER_SESSION_TIMEOUT_MS."""
    given = options.consumer_properties.get("session.timeout.ms")
    return given if isinstance(given, int) else MEMBER_SESSION_TIMEOUT_MS


def membership_properties(options: SourceOptions, group: str, index: int) -> dict[str, object]:
    """The Kafka properties (dotted names) of member ``index``'s client in ``group``."""
    props = options.consumer_properties
    instance = props.pop("group.instance.id", None)
    if instance:  # static membership: one id per member
        props["group.instance.id"] = f"{instance}-{index}"
    props.update(
        {
            "session.timeout.ms": session_timeout_ms(options),
            "bootstrap.servers": options.bootstrap_servers.split(","),
            "group.id": group,
            "enable.auto.commit": False,
            # positions of this client are never used (it fetches nothing); a
            # reset policy of 'none' would fail its poll on a partition without commit
            "auto.offset.reset": "latest",
            "client.id": f"crkafka-{group}-{index}",
        }
    )
    return props


def groupless_properties(options: SourceOptions, client_id: str) -> dict[str, object]:
    """The pass-through properties with no group, no auto commit and no offset reset
    (dotted names), so that a missing offset is an error the caller handles, never a
    silent jump."""
    props = options.consumer_properties
    props.pop("group.instance.id", None)
    props.update(
        {
            "bootstrap.servers": options.bootstrap_servers.split(","),
            "group.id": None,
            "enable.auto.commit": False,
            "auto.offset.reset": "none",
            "client.id": client_id,
        }
    )
    return props


__all__ = ["groupless_properties", "member_name", "membership_properties", "session_timeout_ms"]
