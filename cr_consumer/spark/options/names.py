"""The names of the ``crkafka`` source's options: spellings and those refused.

pyspark lower-cases option names before the source sees them, so every table
here is keyed by the lower-cased name; an error names the option by its
spelling (:data:`SPELLING`) where it can. An unknown name is answered with the
closest valid one (:func:`closest`); :data:`SUGGESTED` names it where
:mod:`difflib` finds nothing close.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

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
