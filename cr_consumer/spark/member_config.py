"""Who a query's group members are: their names and the Kafka properties of
each member's client (:class:`~cr_consumer.spark.membership.GroupMember`)."""

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


__all__ = ["member_name", "membership_properties", "session_timeout_ms"]
