"""Selecting the Kafka client: OperatorConfig.client (validated, the missing extra
named), and the --kafka-client flag of crkafka run/member/drill reaching it (no broker)."""

from __future__ import annotations

import argparse
import importlib.util

import pytest

from coordinator.protocol.region.config import RegionConfig
from cr_consumer.cli import drill as drill_cli
from cr_consumer.cli import member as member_cli
from cr_consumer.kafka.client import ClientKind
from cr_consumer.operator.config import ConfigError, OperatorConfig
from cr_consumer.operator.region import RegionPermit
from cr_consumer.runtime.member.setup import MemberSettings, make_source
from cr_consumer.runtime.pipeline.wiring import KafkaSource
from cr_consumer.runtime.runner.launch import member_argv

BASE = dict(bootstrap_servers="127.0.0.1:9092", group_id="g", operator_name="m0", topics=["t"])
REGION = {
    "mode": "periodic",
    "period_s": 1.0,
    "drain_timeout_s": 30.0,
    "reset_timeout_s": 30.0,
    "max_consecutive_resets": 5,
    "member_timeout_s": 5.0,
}


def test_the_client_defaults_to_kafka_python_and_takes_either_name():
    assert OperatorConfig(**BASE).client is ClientKind.KAFKA_PYTHON
    assert OperatorConfig(**BASE, client="librdkafka").client is ClientKind.LIBRDKAFKA
    assert OperatorConfig(**BASE, client=ClientKind.LIBRDKAFKA).client is ClientKind.LIBRDKAFKA
    with pytest.raises(ConfigError, match="kafka-python, librdkafka"):
        OperatorConfig(**BASE, client="java")


def test_librdkafka_without_confluent_kafka_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "confluent_kafka" else real(name, *a)
    )
    with pytest.raises(ConfigError, match=r"cr-consumer\[librdkafka\]"):
        OperatorConfig(**BASE, client="librdkafka")
    assert OperatorConfig(**BASE).client is ClientKind.KAFKA_PYTHON  # the default needs no extra


def test_librdkafka_property_names_are_left_to_librdkafka_and_guarantees_refused_for_both():
    with pytest.raises(ConfigError, match="not a kafka-python consumer setting"):
        OperatorConfig(**BASE, consumer_properties={"queued.max.messages.kbytes": 1024})
    cfg = OperatorConfig(**BASE, client="librdkafka", consumer_properties={"queued.max.messages.kbytes": 1024})
    assert cfg.client_properties()["queued.max.messages.kbytes"] == 1024
    for client in ("kafka-python", "librdkafka"):
        for key in ("enable.auto.commit", "enable.auto.offset.store", "enable.partition.eof"):
            with pytest.raises(ConfigError, match=key):
                OperatorConfig(**BASE, client=client, consumer_properties={key: "true"})


def _parse(add_arguments, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_crkafka_run_passes_the_client_to_its_members_and_member_to_the_source():
    argv = member_argv(
        "python",
        "examples/wordcount.py",
        name="member-0",
        coordinator="tcp://127.0.0.1:1",
        bootstrap="127.0.0.1:9092",
        group="g",
        output_dir="out",
        state_dir="state",
        region_index=0,
        min_members=1,
        region=REGION,
        params={},
        kafka_stdin=False,
        kafka_client="librdkafka",
    )
    rest = argv[argv.index("cr_consumer.cli.member") + 1 :]
    assert rest[:4] == ["--log-level", "INFO", "--log-format", "text"]  # the main parser's options
    args = _parse(member_cli.add_arguments, rest[4:])
    assert args.kafka_client == "librdkafka"
    default = member_argv(
        "python",
        "p.py",
        name="m",
        coordinator="tcp://127.0.0.1:1",
        bootstrap="b:1",
        group="g",
        output_dir="o",
        state_dir="s",
        region_index=0,
        min_members=1,
        region=REGION,
        params={},
        kafka_stdin=False,
    )
    assert "--kafka-client" not in default
    settings = MemberSettings(
        pipeline="p.py",
        bootstrap="127.0.0.1:9092",
        coordinator="tcp://127.0.0.1:1",
        group="g",
        member="m0",
        output_dir="out",
        state_dir="state",
        kafka_client=args.kafka_client,
    )
    source, client = make_source(
        settings,
        KafkaSource(topics=["t"]),
        RegionConfig.from_dict({**REGION, "name": "g"}),
        permit=RegionPermit(),
        region=None,
        submit=lambda records: None,
        curve=None,
    )
    try:
        assert source.config.client is ClientKind.LIBRDKAFKA
        assert client is None
    finally:
        source.close()


def test_crkafka_drill_takes_the_client():
    args = _parse(drill_cli.add_arguments, ["--scenario", "kill-member", "--kafka-client", "librdkafka"])
    assert [cfg.kafka_client for cfg in drill_cli.configs(args)] == ["librdkafka"]
    args = _parse(drill_cli.add_arguments, ["--scenario", "kill-member"])
    assert [cfg.kafka_client for cfg in drill_cli.configs(args)] == [None]
