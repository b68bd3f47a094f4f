"""Removing a consumer from its group with kafka-python's admin client (a
restarted member evicts its dead predecessor: ``runtime/member/group_state.py``).

1. :func:`admin_settings`: bootstrap, the request timeout, a client id, and
   the connection/security settings of the consumer properties that the admin
   client also knows (dotted -> kafka-python names; consumer-only settings are
   left out).
2. :func:`remove_group_member`: the admin API's ``remove_group_members`` for one
   member (LeaveGroup on its behalf); None when the broker confirmed it, else
   the broker's error name. Other failures (no broker, an old broker) raise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka.admin import KafkaAdminClient, MemberToRemove
from kafka.errors import NoError

from cr_consumer.kafka.kafka_python.properties import kafka_python_name


def admin_settings(
    bootstrap_servers: object, properties: Mapping[str, object], *, request_timeout_ms: int, client_id: str
) -> dict[str, Any]:
    """Step 1."""
    known = KafkaAdminClient.DEFAULT_CONFIG
    out: dict[str, Any] = {
        "bootstrap_servers": bootstrap_servers,
        "request_timeout_ms": request_timeout_ms,
        "client_id": client_id,
    }
    for key, value in properties.items():
        name = kafka_python_name(key)
        if name in known and name not in out:
            out[name] = value
    return out


def remove_group_member(settings: Mapping[str, Any], group: str, member_id: str, reason: str) -> str | None:
    """Step 2 (``settings`` from :func:`admin_settings`)."""
    admin = KafkaAdminClient(**settings)
    try:
        result = admin.remove_group_members(group, [MemberToRemove(member_id=member_id, reason=reason)])
    finally:
        admin.close()
    error = result.get(member_id)
    if error is NoError:
        return None
    return error.__name__ if isinstance(error, type) else str(error)


__all__ = ["admin_settings", "remove_group_member"]
