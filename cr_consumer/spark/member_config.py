"""Who a query's group members are: their names and the kafka-python settings
of each member's consumer (:class:`~cr_consumer.spark.membership.GroupMember`)."""

from __future__ import annotations

from cr_consumer.spark.options import SourceOptions
from cr_consumer.spark.options.kafka_properties import MEMBER_SESSION_TIMEOUT_MS


def member_name(i: int) -> str:
    return f"crkafka-{i}"


def session_timeout_ms(options: SourceOptions) -> int:
    """The members' session timeout: ``kafka.session.timeout.ms``, else MEMBER_SESSION_TIMEOUT_MS."""
    given = options.consumer_properties.get("session.timeout.ms")
    return given if isinstance(given, int) else MEMBER_SESSION_TIMEOUT_MS


def membership_config(options: SourceOptions, group: str, index: int) -> dict:
    """kafka-python keyword arguments of member ``index``'s consumer in ``group``."""
    config = options.kafka_config
    instance = config.pop("group_instance_id", None)
    if instance:  # static membership: one id per member
        config["group_instance_id"] = f"{instance}-{index}"
    config.update(
        session_timeout_ms=session_timeout_ms(options),
        bootstrap_servers=options.bootstrap_servers.split(","),
        group_id=group,
        enable_auto_commit=False,
        # positions of this consumer are never used (it fetches nothing); a
        # reset policy of 'none' would fail its poll on a partition without commit
        auto_offset_reset="latest",
        client_id=f"crkafka-{group}-{index}",
    )
    return config


__all__ = ["member_name", "membership_config", "session_timeout_ms"]
