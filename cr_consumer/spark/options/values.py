"""The ``crkafka`` source's option names and single values: booleans, integers, times, topic names.

Each parser takes the option's name (for the error) and its raw string, and
returns the typed value or raises :class:`InvalidOptionError` naming the option
and what it expected.

pyspark lower-cases option names before the source sees them, so every table
of names here is keyed by the lower-cased name; an error names the option by
its spelling (:data:`SPELLING`) where it can. An unknown name is answered with
the closest valid one (:func:`closest`); :data:`SUGGESTED` names it where
:mod:`difflib` finds nothing close.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import re
from collections.abc import Mapping


class InvalidOptionError(ValueError):
    """A ``crkafka`` option is missing, unknown or invalid; the message names it."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"crkafka option {option!r}: {problem}")
        self.option = option


#: A valid Kafka topic name (Kafka's own rule: at most 249 of these characters).
TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")


def parse_bool(option: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise InvalidOptionError(option, f"expected true or false, got {raw!r}")


def parse_int(option: str, raw: str, minimum: int | None = None) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidOptionError(option, f"expected an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise InvalidOptionError(option, f"must be >= {minimum}, got {value}")
    return value


def parse_time(option: str, raw: str) -> int:
    """Epoch milliseconds from an integer or an ISO-8601 date-time (UTC if no zone)."""
    text = raw.strip()
    if re.fullmatch(r"-?\d+", text):
        value = int(text)
    else:
        try:
            moment = _dt.datetime.fromisoformat(text)
        except ValueError:
            raise InvalidOptionError(
                option, f"expected epoch milliseconds or an ISO-8601 date-time, got {raw!r}"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=_dt.UTC)
        value = int(moment.timestamp() * 1000)
    if value < 0:
        raise InvalidOptionError(option, f"must not be before 1970-01-01, got {raw!r}")
    return value


def required(opts: Mapping[str, str], name: str) -> str:
    """The stripped value of option ``name`` (looked up lower-cased); it must be given and not blank."""
    value = opts.get(name.lower())
    if value is None or not str(value).strip():
        raise InvalidOptionError(name, "is required")
    return str(value).strip()


#: Every option by its lower-cased name -> its spelling (kafka.* aside).
SPELLING = {
    name.lower(): name
    for name in (
        "kafka.bootstrap.servers",
        "subscribe",
        "subscribePattern",
        "assign",
        "startingOffsets",
        "startingTimestamp",
        "startingOffsetsByTimestamp",
        "endingOffsets",
        "commitOnBatchRead",
        "maxOffsetsPerTrigger",
        "minPartitions",
        "failOnDataLoss",
        "includeHeaders",
        "kafka.group.id",
        "groupIdPrefix",
        "coordinator",
        "members",
        "regionIndex",
        "metricsPort",
        "metricsHost",
        "kafka.client",
    )
}

#: Unknown names -> the option to suggest, where difflib finds none close (used
#: only for the error: these names are refused like any unknown one).
SUGGESTED = {"startposition": "startingOffsets", "maxrecordsperbatch": "maxOffsetsPerTrigger"}

#: Options of Spark's Kafka source that crkafka does not offer, and why.
UNSUPPORTED = {
    "endingtimestamp": "batch reads end at endingOffsets",
    "endingoffsetsbytimestamp": "batch reads end at endingOffsets",
    "startingoffsetsbytimestampstrategy": "a partition with no record at or after the timestamp starts at latest",
    "minoffsetspertrigger": "every trigger reads what is available (up to maxOffsetsPerTrigger)",
    "maxtriggerdelay": "every trigger reads what is available (up to maxOffsetsPerTrigger)",
    "kafkaconsumer.polltimeoutms": "executors bound each range read themselves",
    "fetchoffset.numretries": "end offsets are read from a fetch's high watermark",
    "fetchoffset.retryintervalms": "end offsets are read from a fetch's high watermark",
    "maxrecordsperpartition": "use maxOffsetsPerTrigger",
}


def closest(name: str) -> str:
    """The valid option closest to the unknown ``name`` (its spelling), for the error."""
    if name in SUGGESTED:
        return SUGGESTED[name]
    match = difflib.get_close_matches(name, list(SPELLING), n=1, cutoff=0.6)
    if not match:
        return "none close; valid: " + ", ".join(sorted(SPELLING.values()))
    return SPELLING[match[0]]


def normalised(raw: Mapping[str, str]) -> dict[str, str]:
    """Spark's option map keyed by lower-cased names (None values as "")."""
    return {str(k).lower(): ("" if v is None else str(v)) for k, v in dict(raw).items()}
