"""``partition.assignment.strategy`` read by one table: every spelling is accepted by
OperatorConfig and by both clients with the same standard names and the same
rebalance protocol, or refused by all three naming the accepted spellings (no
broker: the config builders are pure and a client is built without connecting).
Also the subscribe arguments, checked the same way by both clients."""

from __future__ import annotations

import pytest
from kafka.coordinator.assignors.range import RangePartitionAssignor

from cr_consumer.kafka.assignors import SPELLINGS, AssignmentStrategy, parse_strategy
from cr_consumer.kafka.client import (
    ClientConfigError,
    ClientKind,
    RebalanceProtocol,
    TopicPartition,
    check_subscription,
)
from cr_consumer.kafka.factory import make_client
from cr_consumer.kafka.kafka_python.properties import kafka_python_config
from cr_consumer.kafka.librdkafka.properties import librdkafka_config
from cr_consumer.operator.config import ConfigError, OperatorConfig

KEY = "partition.assignment.strategy"
#: Client properties that need no broker to build a client (kafka-python asks the
#: broker its version at construction unless it is given).
CLIENT_BASE = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "api.version": (2, 5, 0)}
CONFIG_BASE = dict(bootstrap_servers="127.0.0.1:1", group_id="g", operator_name="m0", topics=["t"])
JAVA = "org.apache.kafka.clients.consumer."

#: A spelling (as a user writes it) -> the standard names all three must read it as.
ACCEPTED = [
    ("range", ("range",)),
    ("roundrobin", ("roundrobin",)),
    ("cooperative-sticky", ("cooperative-sticky",)),
    # Java class names, with and without the package
    (JAVA + "RangeAssignor", ("range",)),
    (JAVA + "RoundRobinAssignor", ("roundrobin",)),
    (JAVA + "CooperativeStickyAssignor", ("cooperative-sticky",)),
    ("RangeAssignor", ("range",)),
    ("RoundRobinAssignor", ("roundrobin",)),
    ("CooperativeStickyAssignor", ("cooperative-sticky",)),
    # kafka-python's class names
    ("RangePartitionAssignor", ("range",)),
    ("RoundRobinPartitionAssignor", ("roundrobin",)),
    # any case, spaces around names
    ("Range", ("range",)),
    (" COOPERATIVE-STICKY ", ("cooperative-sticky",)),
    # lists: a comma-separated string or a sequence, order kept, repeats once
    ("range,roundrobin", ("range", "roundrobin")),
    ("roundrobin, range", ("roundrobin", "range")),
    (["roundrobin"], ("roundrobin",)),
    (("RangePartitionAssignor", JAVA + "RoundRobinAssignor"), ("range", "roundrobin")),
    (f"{JAVA}RangeAssignor,roundrobin", ("range", "roundrobin")),
    ("range,range", ("range",)),
    (["cooperative-sticky", "CooperativeStickyAssignor"], ("cooperative-sticky",)),
]

#: Spellings all three refuse.
REFUSED = [
    "sticky",  # the eager sticky assignor: not in librdkafka
    JAVA + "StickyAssignor",
    "range_partition_assignor",  # no library spells it so
    "cooperative_sticky",
    "cooperativesticky",
    "kafka.coordinator.assignors.range.RangePartitionAssignor",
    "",
    " , ",
    "range,",
    [],
    ["range", ""],
    "range,cooperative-sticky",  # eager and cooperative mixed
    ["CooperativeStickyAssignor", "roundrobin"],
    42,
    None,  # given (not left out) but empty
    RangePartitionAssignor,  # a class, not a name
    [RangePartitionAssignor],
]


def _names_of_kafka_python(value: object) -> tuple[str, ...]:
    return tuple(cls.name for cls in kafka_python_config({**CLIENT_BASE, KEY: value})[KEY.replace(".", "_")])


def _protocol_of(kind: ClientKind, value: object) -> RebalanceProtocol:
    client = make_client(
        kind,
        {**CLIENT_BASE, KEY: value}
        if kind is ClientKind.KAFKA_PYTHON
        else {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", KEY: value},
    )
    try:
        return client.rebalance_protocol
    finally:
        client.close(1000)


@pytest.mark.parametrize(("value", "names"), ACCEPTED, ids=repr)
def test_a_spelling_is_read_the_same_by_the_config_and_both_clients(value, names):
    protocol = RebalanceProtocol.COOPERATIVE if names == ("cooperative-sticky",) else RebalanceProtocol.EAGER
    for client in ClientKind:
        config = OperatorConfig(**CONFIG_BASE, client=client, consumer_properties={KEY: value})
        assert config.assignor_names == names
        assert config.cooperative is (protocol is RebalanceProtocol.COOPERATIVE)
        assert config.client_properties()[KEY] == ",".join(names)
    # each client reads the spelling itself (not only the config's standard names)
    assert _names_of_kafka_python(value) == names
    assert librdkafka_config({**CLIENT_BASE, KEY: value})[KEY] == ",".join(names)
    strategy = parse_strategy(value)
    assert strategy.names == names
    assert strategy.protocol is protocol


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("range,roundrobin", ("range", "roundrobin")),
        (JAVA + "CooperativeStickyAssignor", ("cooperative-sticky",)),
        ("RangePartitionAssignor", ("range",)),
    ],
    ids=repr,
)
@pytest.mark.parametrize("kind", list(ClientKind), ids=lambda k: k.value)
def test_both_clients_run_the_protocol_the_names_choose(kind, value, names):
    cooperative = names == ("cooperative-sticky",)
    assert _protocol_of(kind, value) is (RebalanceProtocol.COOPERATIVE if cooperative else RebalanceProtocol.EAGER)


@pytest.mark.parametrize("kind", list(ClientKind), ids=lambda k: k.value)
def test_without_a_strategy_both_clients_run_range_and_roundrobin_eagerly(kind):
    assert _protocol_of(kind, "range,roundrobin") is RebalanceProtocol.EAGER
    client = make_client(
        kind, {k: v for k, v in CLIENT_BASE.items() if kind is ClientKind.KAFKA_PYTHON or k != "api.version"}
    )
    try:
        assert client.rebalance_protocol is RebalanceProtocol.EAGER
    finally:
        client.close(1000)
    assert OperatorConfig(**CONFIG_BASE, client=kind).assignor_names == ("range", "roundrobin")


def _names_every_spelling(message: str) -> None:
    for spelling in SPELLINGS:
        assert spelling in message, (spelling, message)


@pytest.mark.parametrize("value", REFUSED, ids=repr)
def test_a_spelling_refused_is_refused_by_all_three_naming_the_accepted_spellings(value):
    for client in ClientKind:
        with pytest.raises(ConfigError, match=KEY) as info:
            OperatorConfig(**CONFIG_BASE, client=client, consumer_properties={KEY: value})
        _names_every_spelling(str(info.value))
    with pytest.raises(ClientConfigError, match=KEY) as info:
        kafka_python_config({**CLIENT_BASE, KEY: value})
    _names_every_spelling(str(info.value))
    with pytest.raises(ClientConfigError, match=KEY) as info:
        librdkafka_config({**CLIENT_BASE, KEY: value})
    _names_every_spelling(str(info.value))


def test_the_table_names_each_standard_name_and_the_default():
    assert set(SPELLINGS.values()) == {"range", "roundrobin", "cooperative-sticky"}
    assert all(SPELLINGS[name] == name for name in ("range", "roundrobin", "cooperative-sticky"))
    assert AssignmentStrategy.DEFAULT.names == ("range", "roundrobin")
    assert AssignmentStrategy.DEFAULT.protocol is RebalanceProtocol.EAGER


# -- the subscribe arguments ----------------------------------------------------------
class _NoListener:
    def on_assigned(self, partitions: frozenset[TopicPartition]) -> None: ...

    def on_revoked(self, partitions: frozenset[TopicPartition]) -> None: ...

    def on_lost(self, partitions: frozenset[TopicPartition]) -> None: ...


@pytest.mark.parametrize(
    ("topics", "pattern"),
    [
        ((), None),
        ((), ""),
        (["t"], "t.*"),
        ("topic", None),
        (["t", ""], None),
        ([1], None),
    ],
    ids=repr,
)
def test_subscribe_takes_topics_or_a_pattern_exactly_one(topics, pattern):
    with pytest.raises(ValueError, match="subscribe"):
        check_subscription(topics, pattern)
    for kind in ClientKind:
        client = make_client(
            kind,
            CLIENT_BASE if kind is ClientKind.KAFKA_PYTHON else {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"},
        )
        try:
            with pytest.raises(ValueError, match="subscribe"):
                client.subscribe(topics, pattern=pattern, listener=_NoListener())
        finally:
            client.close(1000)


def test_subscribe_arguments_accepted():
    check_subscription(["a", "b"], None)
    check_subscription((), "a.*")
