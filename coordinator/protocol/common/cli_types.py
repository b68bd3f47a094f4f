"""argparse value types shared by the ``crkafka`` commands: a bad value is a usage
error (a message on stderr, exit 2), never a traceback.

* :func:`duration`: every time flag takes ``500ms``, ``10s``, ``1m``, ``2h`` or
  plain seconds (``1.5``);
* :func:`port`: a TCP port, 1-65535;
* :func:`positive_int`: a count >= 1; :func:`bounded_int`: an integer in a range;
* :func:`usage_error_of`: the type of a flag parsed by a function that raises ValueError.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")  # what a flag's type parses its text into

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*")
#: Longest duration accepted (a year): bounds every wait built from a flag.
MAX_DURATION_S = 365 * 86400.0


def duration(text: str) -> float:
    """``500ms``, ``10s``, ``1m``, ``2h``, ``1d``, ``1w`` or plain seconds -> seconds (> 0)."""
    m = _DURATION.fullmatch(str(text))
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (examples: 1.5, 500ms, 10s, 1m, 2h)")
    value = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if value <= 0:
        raise argparse.ArgumentTypeError(f"duration {text!r} must be > 0")
    if value > MAX_DURATION_S:
        raise argparse.ArgumentTypeError(f"duration {text!r} is longer than a year")
    return value


def bounded_duration(lo: float, hi: float) -> Callable[[str], float]:
    """A duration parser that also refuses values outside ``lo..hi`` seconds."""

    def parse(text: str) -> float:
        value = duration(text)
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{text!r} is outside {lo:g}..{hi:g} seconds")
        return value

    return parse


def port(text: str) -> int:
    """A TCP port number, 1-65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is out of range (1-65535)")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def bounded_int(lo: int, hi: int) -> Callable[[str], int]:
    """An integer parser that refuses values outside ``lo..hi``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is outside {lo}..{hi}")
        return value

    return parse


def usage_error_of(parse: Callable[[str], T]) -> Callable[[str], T]:
    """A flag type from a parser that raises ValueError: its message becomes the usage
    error (argparse would otherwise print only "invalid value")."""

    def flag_type(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return flag_type


__all__ = ["MAX_DURATION_S", "bounded_duration", "bounded_int", "duration", "port", "positive_int", "usage_error_of"]
