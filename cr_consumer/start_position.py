"""Initial offsets of partitions the job sees for the first time.

Runs on the event thread (it calls blocking KafkaConsumer methods). The result
is saved as the partition's control variable (first writer wins), so the start
position applies only once per partition and job:

* DEFAULT: the group's committed offset, else ``auto.offset.reset``;
* BEGINNING: the log start offset;
* END: the log end offset;
* TIME: the first offset whose timestamp is >= start_time
  (``offsets_for_times``), else ``auto.offset.reset``.
"""

from __future__ import annotations

import logging

from cr_consumer.config import OperatorConfig, StartPosition

log = logging.getLogger(__name__)

#: Bound on each offset lookup so a lost broker fails the assignment handling
#: (and thus the operator) instead of hanging the event thread.
LOOKUP_TIMEOUT_MS = 15000


class NoStartOffset(RuntimeError):
    """auto.offset.reset=none and a partition has no committed offset."""


def _fallback(consumer, config: OperatorConfig, tps: list) -> dict:
    if not tps:
        return {}
    policy = config.auto_offset_reset
    if policy == "earliest":
        return dict(consumer.beginning_offsets(tps, timeout_ms=LOOKUP_TIMEOUT_MS))
    if policy == "latest":
        return dict(consumer.end_offsets(tps, timeout_ms=LOOKUP_TIMEOUT_MS))
    raise NoStartOffset(
        f"no committed offset for {sorted(tps)} and auto.offset.reset is 'none': "
        "set auto.offset.reset to earliest/latest or choose another start position"
    )


def initial_offsets(consumer, config: OperatorConfig, tps) -> dict:
    """{TopicPartition: offset} for every partition in ``tps``."""
    tps = sorted(tps)
    if not tps:
        return {}
    pos = config.start_position
    if pos is StartPosition.BEGINNING:
        return dict(consumer.beginning_offsets(tps, timeout_ms=LOOKUP_TIMEOUT_MS))
    if pos is StartPosition.END:
        return dict(consumer.end_offsets(tps, timeout_ms=LOOKUP_TIMEOUT_MS))
    if pos is StartPosition.TIME:
        found = consumer.offsets_for_times({tp: config.start_time for tp in tps}, timeout_ms=LOOKUP_TIMEOUT_MS)
        out = {tp: ot.offset for tp, ot in found.items() if ot is not None}
        out.update(_fallback(consumer, config, [tp for tp in tps if tp not in out]))
        return out
    out = {}
    for tp in tps:
        committed = consumer.committed(tp, timeout_ms=LOOKUP_TIMEOUT_MS)
        if committed is not None:
            out[tp] = committed
    out.update(_fallback(consumer, config, [tp for tp in tps if tp not in out]))
    return out


__all__ = ["NoStartOffset", "initial_offsets"]
