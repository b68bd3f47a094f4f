"""cr_consumer: a consistent-region Kafka consumer-group operator.

Public API::

    from cr_consumer import ConsumerOperator, OperatorConfig, StartKind, StartPosition
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names __getattr__ loads, as type checkers see them
    from cr_consumer.operator.config import OperatorConfig, StartKind, StartPosition
    from cr_consumer.operator.config import RegionMode as RegionMode
    from cr_consumer.operator.consumer import ConsumerOperator

try:
    __version__ = version("cr-consumer")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["ConsumerOperator", "OperatorConfig", "StartKind", "StartPosition", "__version__"]


def __getattr__(name: str) -> object:  # lazy: importing the package must not import kafka
    if name in ("OperatorConfig", "StartKind", "StartPosition", "RegionMode"):
        from cr_consumer.operator import config

        return getattr(config, name)
    if name == "ConsumerOperator":
        from cr_consumer.operator.consumer import ConsumerOperator

        return ConsumerOperator
    raise AttributeError(name)
