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
        if key not in CONSUMED:
            cfg.update(_mapped(key, value, RENAMED))
    if "partition.assignment.strategy" in cfg:
        cfg["partition.assignment.strategy"] = str(parse_strategy(cfg["partition.assignment.strategy"]))
    if "metadata.max.age.ms" in cfg:
        cfg.setdefault("topic.metadata.refresh.interval.ms", cfg["metadata.max.age.ms"])
    for key, value in DEFAULTS.items():
        cfg.setdefault(key, value)
    cfg.update({"enable.auto.commit": False, "enable.auto.offset.store": False, "enable.partition.eof": False})
    return cfg


#: The producer's renames: the consumer's but ``request.timeout.ms``, a librdkafka producer setting
#: of that name (a produce request's bound).
PRODUCER_RENAMED: Mapping[str, str] = {k: v for k, v in RENAMED.items() if k != "request.timeout.ms"}
#: Settings the producer adapter uses itself (``librdkafka/producer.py``): ``max.block.ms`` bounds
#: ``init_transactions`` and a send's wait for room in a full queue, as it does kafka-python's.
PRODUCER_CONSUMED = frozenset({"max.block.ms"})
#: The producer's settings unless given: the partitioner is the Java client's and kafka-python's
#: (murmur2 of the key; librdkafka's own default hashes with CRC32), so a keyed record goes to
#: the same partition whichever client writes it (partition-scoped state needs its input
#: partitioned by its key).
PRODUCER_DEFAULTS: Mapping[str, object] = {"partitioner": "murmur2_random"}


def librdkafka_producer_config(properties: Mapping[str, object]) -> dict[str, object]:
    """librdkafka producer settings for ``properties`` (checked before:
    ``property_rules.check_producer_properties``)."""
    cfg: dict[str, object] = {}
    for key, value in properties.items():
        if key not in PRODUCER_CONSUMED:
            cfg.update(_mapped(key, value, PRODUCER_RENAMED))
    for key, value in PRODUCER_DEFAULTS.items():
        cfg.setdefault(key, value)
    return cfg


def _mapped(key: str, value: object, renamed: Mapping[str, str]) -> dict[str, object]:
    if key == "ssl.check.hostname":
        return {"ssl.endpoint.identification.algorithm": "https" if value in (True, "true", "True", 1) else "none"}
    return {renamed.get(key, key): value}


__all__ = [
    "CONSUMED",
    "DEFAULTS",
    "PRODUCER_CONSUMED",
    "PRODUCER_DEFAULTS",
    "RENAMED",
    "librdkafka_config",
    "librdkafka_producer_config",
]
