"""Kafka properties through the seam (no broker): the same dotted names for both
clients, the few renamed ones mapped, guarantee-breaking ones refused, and a
missing librdkafka named by its extra."""

from __future__ import annotations

import importlib
import sys

import pytest

from cr_consumer.kafka.client import ClientConfigError, ClientKind, ClientUnavailable
from cr_consumer.kafka.factory import make_client
from cr_consumer.kafka.kafka_python.properties import kafka_python_config
from cr_consumer.kafka.librdkafka.properties import DEFAULTS, librdkafka_config
from cr_consumer.kafka.property_rules import client_checked

BASE = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("enable.auto.commit", True),
        ("enable.auto.commit", "true"),
        ("enable.auto.offset.store", True),
        ("auto.commit.interval.ms", 1000),
        ("enable.partition.eof", True),
    ],
)
@pytest.mark.parametrize("kind", list(ClientKind), ids=lambda k: k.value)
def test_guarantee_breaking_properties_are_refused_by_both(kind, key, value):
    with pytest.raises(ClientConfigError, match=key.replace(".", r"\.")):
        make_client(kind, {**BASE, key: value})


def test_the_safe_value_of_a_guarantee_property_is_accepted():
    assert client_checked({"enable.auto.commit": "false", "enable.auto.offset.store": False, "a": 1}) == {"a": 1}
    assert kafka_python_config({**BASE, "enable.auto.commit": False})["enable_auto_commit"] is False
    cfg = librdkafka_config({**BASE, "enable.auto.commit": "false"})
    assert cfg["enable.auto.commit"] is False
    assert cfg["enable.auto.offset.store"] is False


def test_standard_names_are_mapped_for_librdkafka():
    cfg = librdkafka_config(
        {
            **BASE,
            "fetch.max.wait.ms": 100,
            "request.timeout.ms": 5000,
            "max.poll.records": 50,
            "sasl.plain.username": "u",
            "ssl.cafile": "/ca.pem",
            "ssl.check.hostname": False,
            "metadata.max.age.ms": 2000,
            "session.timeout.ms": 6000,
            "partition.assignment.strategy": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
        }
    )
    assert cfg["fetch.wait.max.ms"] == 100
    assert "fetch.max.wait.ms" not in cfg
    assert cfg["socket.timeout.ms"] == 5000
    assert "max.poll.records" not in cfg
    assert cfg["sasl.username"] == "u"
    assert cfg["ssl.ca.location"] == "/ca.pem"
    assert cfg["ssl.endpoint.identification.algorithm"] == "none"
    assert cfg["topic.metadata.refresh.interval.ms"] == 2000
    assert cfg["session.timeout.ms"] == 6000
    assert cfg["partition.assignment.strategy"] == "cooperative-sticky"


def test_librdkafka_gets_the_adapters_fetch_defaults_unless_given():
    """librdkafka's own fetch.queue.backoff.ms (1 s) idled the fetcher for most
    of every second once its queue passed queued.min.messages (docs/clients.md)."""
    assert DEFAULTS["fetch.queue.backoff.ms"] <= 100
    assert librdkafka_config(BASE)["fetch.queue.backoff.ms"] == DEFAULTS["fetch.queue.backoff.ms"]
    assert librdkafka_config({**BASE, "fetch.queue.backoff.ms": 500})["fetch.queue.backoff.ms"] == 500


def test_standard_names_are_mapped_for_kafka_python():
    cfg = kafka_python_config(
        {
            **BASE,
            "fetch.max.wait.ms": 100,
            "sasl.username": "u",
            "ssl.ca.location": "/ca.pem",
            "partition.assignment.strategy": "range,roundrobin",
        }
    )
    assert cfg["fetch_max_wait_ms"] == 100
    assert cfg["sasl_plain_username"] == "u"
    assert cfg["ssl_cafile"] == "/ca.pem"
    assert [a.name for a in cfg["partition_assignment_strategy"]] == ["range", "roundrobin"]


@pytest.mark.parametrize("kind", list(ClientKind), ids=lambda k: k.value)
def test_mixed_or_unknown_assignors_and_unknown_names_are_refused(kind):
    with pytest.raises(ClientConfigError, match="mixes eager and cooperative"):
        make_client(kind, {**BASE, "partition.assignment.strategy": "range,cooperative-sticky"})
    with pytest.raises(ClientConfigError, match="sticky-ish"):
        make_client(kind, {**BASE, "partition.assignment.strategy": "sticky-ish"})
    with pytest.raises(ClientConfigError, match=r"no\.such\.setting"):
        make_client(kind, {**BASE, "no.such.setting": 1})


@pytest.mark.parametrize("kind", list(ClientKind), ids=lambda k: k.value)
def test_both_refuse_deserializers(kind):
    with pytest.raises(ClientConfigError, match="raw bytes"):
        make_client(kind, {**BASE, "value.deserializer": "x"})


def test_a_missing_confluent_kafka_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # what an interpreter without the package sees
    monkeypatch.delitem(sys.modules, "cr_consumer.kafka.librdkafka.client", raising=False)
    with pytest.raises(ClientUnavailable, match=r"cr-consumer\[librdkafka\]"):
        make_client(ClientKind.LIBRDKAFKA, BASE)
    monkeypatch.undo()
    importlib.import_module("cr_consumer.kafka.librdkafka.client")
