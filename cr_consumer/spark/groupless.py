"""The Kafka properties of a client outside the query's group: the executors'
range reads and the planner's watermark probe (assign and seek, no group)."""

from __future__ import annotations

from cr_consumer.spark.options import SourceOptions


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


__all__ = ["groupless_properties"]
