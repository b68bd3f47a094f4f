"""Logging set-up shared by every entry point (``crkafka``, its member processes, ``cr-coordinator``).

1. ``--log-level`` takes a level (``INFO``) or per-logger levels
   (``root=INFO,kafka=WARNING,coordinator=DEBUG``); :func:`parse_log_levels`
   checks it as an argparse ``type`` so a bad value is a usage error (exit 2),
   never a traceback.
2. :func:`setup_logging` configures the root handler on stderr, once per
   process, in one of two formats: ``text`` (a human line) or ``json`` (one
   JSON object per line: ``ts``, ``level``, ``logger``, ``thread``, ``msg``
   and ``exc`` when an exception is attached).
3. kafka-python logs three lines (two at ERROR) on every reconnect attempt
   to an unreachable broker. Unless the spec names a ``kafka`` logger, the
   ``kafka`` loggers are set to WARNING and :class:`ConnectionRefusedFilter`
   drops their connection-refused records, so the member's own message naming
   the broker is what a user sees.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import IO

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s"
#: Level of kafka-python's loggers unless the spec names one (its INFO lines
#: repeat at every bootstrap attempt).
KAFKA_DEFAULT_LEVEL = "WARNING"
#: Text of kafka-python's connection-refused records (dropped by default).
_REFUSED = ("ECONNREFUSED", "Connection refused", "not ready; waiting")
#: Most ``logger=LEVEL`` items in one spec (bounds the parse).
MAX_ITEMS = 50


class LogLevels(dict[str, str]):
    """Logger name ('' is root) -> level name; ``str()`` gives the spec back."""

    def __str__(self) -> str:
        return ",".join(f"{name or 'root'}={level}" for name, level in self.items())


def parse_log_levels(text: str) -> LogLevels:
    """``INFO`` or ``root=INFO,kafka=WARNING`` -> :class:`LogLevels` (argparse type)."""
    items = [part.strip() for part in str(text).split(",") if part.strip()]
    if not items:
        raise argparse.ArgumentTypeError("empty log level (give e.g. INFO or root=INFO,kafka=WARNING)")
    if len(items) > MAX_ITEMS:
        raise argparse.ArgumentTypeError(f"more than {MAX_ITEMS} logger levels")
    out = LogLevels()
    for item in items:
        name, sep, level = item.rpartition("=")
        name = name.strip() if sep else "root"
        level = level.strip().upper()
        if level == "WARN":
            level = "WARNING"
        if level not in LEVELS:
            raise argparse.ArgumentTypeError(
                f"{item!r}: {level.lower()!r} is not a logging level (one of {', '.join(LEVELS)})"
            )
        if not name:
            raise argparse.ArgumentTypeError(f"{item!r}: empty logger name (use root=LEVEL)")
        out["" if name == "root" else name] = level
    return out


def parse_log_format(text: str) -> str:
    """``text`` or ``json`` (argparse type)."""
    value = str(text).strip().lower()
    if value not in FORMATS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a log format (text or json)")
    return value


def add_logging_arguments(parser: argparse.ArgumentParser) -> None:
    """``--log-level`` and ``--log-format`` with validation."""
    parser.add_argument(
        "--log-level",
        type=parse_log_levels,
        default=parse_log_levels("INFO"),
        metavar="LEVELS",
        help="a level (DEBUG, INFO, WARNING, ERROR) or per-logger levels, e.g. root=INFO,kafka=WARNING (default INFO)",
    )
    parser.add_argument(
        "--log-format",
        type=parse_log_format,
        default="text",
        metavar="FORMAT",
        help="text (default) or json (one JSON object per line)",
    )


class ConnectionRefusedFilter(logging.Filter):
    """Drops kafka-python's connection-refused records (step 3)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "kafka" and not record.name.startswith("kafka."):
            return True
        message = record.getMessage()
        return not any(text in message for text in _REFUSED)


class JsonFormatter(logging.Formatter):
    """One JSON object per record (JSON lines)."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "ts": round(record.created, 6),
            "level": record.levelname,
            "logger": record.name,
            "thread": record.threadName,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def setup_logging(levels: LogLevels | str = "INFO", fmt: str = "text", stream: IO[str] | None = None) -> None:
    """Steps 2-3 of the module docstring. Replaces any handler already on the root logger."""
    if isinstance(levels, str):
        levels = parse_log_levels(levels)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if parse_log_format(fmt) == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(levels.get("", "INFO"))
    if not any(name == "kafka" or name.startswith("kafka.") for name in levels):
        logging.getLogger("kafka").setLevel(KAFKA_DEFAULT_LEVEL)
        handler.addFilter(ConnectionRefusedFilter())
    for name, level in levels.items():
        if name:
            logging.getLogger(name).setLevel(level)


__all__ = [
    "FORMATS",
    "LEVELS",
    "ConnectionRefusedFilter",
    "JsonFormatter",
    "LogLevels",
    "add_logging_arguments",
    "parse_log_format",
    "parse_log_levels",
    "setup_logging",
]
