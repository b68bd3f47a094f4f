"""Kafka properties (standard dotted names) -> librdkafka settings.

Pure: needs no confluent-kafka (the Spark source's planner reads it too). The
properties are checked before (:mod:`cr_consumer.kafka.property_rules`: the
guarantee properties and the deserialisers never reach this mapping).

1. Settings the adapter uses itself are dropped (:data:`CONSUMED`).
2. kafka-python's and the Java client's spellings of the few settings librdkafka
   names otherwise are mapped (:data:`RENAMED`); ``partition.assignment.strategy``
   is read by :mod:`cr_consumer.kafka.assignors` (librdkafka's names are the
   standard ones); ``metadata.max.age.ms`` also sets how often a pattern
   subscription looks for new topics.
3. The adapter's defaults (:data:`DEFAULTS`) apply unless given; auto commit, the
   automatic offset store and partition-EOF events are always off.

Anything else is passed to librdkafka, which refuses names it does not know.
"""

from __future__ import annotations

from collections.abc import Mapping

from cr_consumer.kafka.assignors import parse_strategy

#: Other clients' names of settings librdkafka spells otherwise (dotted -> librdkafka).
RENAMED: Mapping[str, str] = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "request.timeout.ms": "socket.timeout.ms",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "sasl.mechanism": "sasl.mechanisms",
    "sasl.plain.username": "sasl.username",
    "sasl.plain.password": "sasl.password",
    "ssl.cafile": "ssl.ca.location",
    "ssl.certfile": "ssl.certificate.location",
    "ssl.keyfile": "ssl.key.location",
    "ssl.password": "ssl.key.password",
    "ssl.crlfile": "ssl.crl.location",
    "ssl.ciphers": "ssl.cipher.suites",
}
#: librdkafka settings this adapter sets unless the properties give them (docs/clients.md):
#:
#: * ``fetch.queue.backoff.ms`` (librdkafka: 1000): how long a partition's next
#:   fetch waits once the local queue holds more than ``queued.min.messages``
#:   (100k) records. One fetch response from a broker with a backlog holds
#:   ~50k 100-byte records (1 MB per partition), so two or three responses
#:   pass that mark and the fetcher then idles for a whole second while the
#:   application drains the queue in a fraction of it: a bare consume loop got
#:   ~220k records/s from the embedded broker with the library's value and
#:   0.8-1.5M with 20 ms (BENCHMARKS.md, pacing). 20 ms rechecks the queue
#:   often enough for millions of records/s; a recheck costs a timer wake-up
#:   of librdkafka's broker thread, nothing else.
DEFAULTS: Mapping[str, object] = {"fetch.queue.backoff.ms": 20}
#: Settings the adapter uses itself (not passed to librdkafka): the poll's record cap
#: is the ``max_records`` argument of poll.
CONSUMED = frozenset({"max.poll.records"})


def librdkafka_config(properties: Mapping[str, object]) -> dict[str, object]:
    """librdkafka settings for ``properties`` (see the module docstring)."""
    cfg: dict[str, object] = {}
    for key, value in properties.items():
        if key in CONSUMED:
            continue
        if key == "ssl.check.hostname":
            cfg["ssl.endpoint.identification.algorithm"] = "https" if value in (True, "true", "True", 1) else "none"
            continue
        cfg[RENAMED.get(key, key)] = value
    if "partition.assignment.strategy" in cfg:
        cfg["partition.assignment.strategy"] = str(parse_strategy(cfg["partition.assignment.strategy"]))
    if "metadata.max.age.ms" in cfg:
        cfg.setdefault("topic.metadata.refresh.interval.ms", cfg["metadata.max.age.ms"])
    for key, value in DEFAULTS.items():
        cfg.setdefault(key, value)
    cfg.update({"enable.auto.commit": False, "enable.auto.offset.store": False, "enable.partition.eof": False})
    return cfg


__all__ = ["CONSUMED", "DEFAULTS", "RENAMED", "librdkafka_config"]
