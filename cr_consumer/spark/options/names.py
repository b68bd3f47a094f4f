"""The names of the ``crkafka`` source's options: spellings, aliases, and those refused.

pyspark lower-cases option names before the source sees them, so every table
here is keyed by the lower-cased name; an error names the option by its
spelling (:data:`SPELLING`) where it can. An unknown name is answered with the
closest valid one (:func:`closest`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from cr_consumer.spark.options.values import InvalidOptionError

#: Every option by its lower-cased name -> its spelling (kafka.* aside).
SPELLING = {name.lower(): name for name in (
    "kafka.bootstrap.servers", "subscribe", "subscribePattern", "assign", "startingOffsets", "startingTimestamp",
    "startingOffsetsByTimestamp", "endingOffsets", "commitOnBatchRead", "maxOffsetsPerTrigger", "minPartitions", "failOnDataLoss",
    "includeHeaders", "kafka.group.id", "groupIdPrefix", "coordinator", "members", "regionIndex", "metricsPort",
    "metricsHost", "kafka.client",
)}

#: Earlier crkafka names -> the option they stand for (documented aliases).
ALIASES = {"group.id": "kafka.group.id", "startposition": "startingOffsets", "starttime": "startingTimestamp",
           "maxrecordsperbatch": "maxOffsetsPerTrigger"}

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
    candidates = list(SPELLING) + list(ALIASES)
    match = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    if not match and name.startswith("kafka."):
        return "kafka.<a Kafka consumer property>"
    if not match:
        return "none close; valid: " + ", ".join(sorted(SPELLING.values()))
    return SPELLING.get(match[0], match[0]) if match[0] not in ALIASES else ALIASES[match[0]]


def normalised(raw: Mapping[str, str]) -> dict[str, str]:
    """Spark's option map keyed by lower-cased names (None values as ""), with the
    plain aliases (``group.id``, ``maxRecordsPerBatch``) renamed to the option they
    stand for; giving both an alias and its option fails."""
    opts = {str(k).lower(): ("" if v is None else str(v)) for k, v in dict(raw).items()}
    if "group.id" in opts:
        if "kafka.group.id" in opts:
            raise InvalidOptionError("group.id", "is an alias of kafka.group.id; give only kafka.group.id")
        opts["kafka.group.id"] = opts.pop("group.id")
    if "maxrecordsperbatch" in opts:
        if "maxoffsetspertrigger" in opts:
            raise InvalidOptionError("maxRecordsPerBatch", "is an alias of maxOffsetsPerTrigger; give only that")
        opts["maxoffsetspertrigger"] = opts.pop("maxrecordsperbatch")
    return opts
