"""Single Kafka requests that no kafka-python client call covers (a Fetch that keeps control
batches, an EndTxn for a transaction another process prepared), each bounded.

1. :class:`RawClient` opens a kafka-python admin client from ``settings``
   (``admin.admin_settings``: bootstrap, security, the request timeout, which bounds every
   request) and closes it on exit.
2. :meth:`RawClient.request` sends one request (to ``node_id``, else the least loaded broker)
   and returns the decoded response; past the caller's ``deadline`` (monotonic seconds) it
   raises ``RawRequestError`` before sending, so a loop of requests never outlives its budget.
   A long-lived client (the source's filter of aborted records) gives each of its reads a
   budget of its own by setting ``deadline`` before it.
3. An error code in a response is named by :func:`error_name` for the caller's message.

The admin client's connection manager is kafka-python's private ``_manager`` (it has no public
call for an arbitrary request); like ``compat.py`` this stays inside the kafka-python package.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from kafka.admin import KafkaAdminClient
from kafka.errors import for_code


class RawRequestError(RuntimeError):
    """A raw request was refused, failed or would pass its deadline."""


class TransactionEndError(RawRequestError):
    """A transaction could not be ended as asked (refused, fenced, timed out)."""


def error_name(code: int) -> str:
    """Step 3: the Kafka error class name of ``code``."""
    return str(for_code(code).__name__)


class RawClient:
    """Steps 1-2."""

    def __init__(self, settings: Mapping[str, Any], deadline: float) -> None:
        self.deadline = deadline
        self._admin = KafkaAdminClient(**settings)

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close the admin client (its connections)."""
        self._admin.close()

    def request(self, request: Any, node_id: int | None = None, what: str = "request") -> Any:
        """Step 2."""
        if time.monotonic() > self.deadline:
            raise RawRequestError(f"{what} would run past its deadline")
        manager = self._admin._manager  # no public raw request in kafka-python (module docstring)

        async def send() -> Any:
            return await manager.send(request, node_id=node_id)

        return manager.run(send)


__all__ = ["RawClient", "RawRequestError", "error_name"]
