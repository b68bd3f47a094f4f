"""Units behind the CLI: log-level specs and formats, durations and ports, the
last-error line read from a member log, JVM-only Kafka property names, pipeline specs."""

from __future__ import annotations

import argparse
import io
import json
import logging

import pytest

from coordinator.protocol.common.cli_types import duration, port
from coordinator.protocol.common.logging_setup import parse_log_levels, setup_logging
from cr_consumer.kafka.client import ClientKind
from cr_consumer.kafka.property_rules import PropertyError, check_name
from cr_consumer.runtime.member.setup import SettingsError, default_stem, split_spec
from cr_consumer.runtime.runner.member_proc import error_record as _error_record
from cr_consumer.runtime.runner.region_runner import Region


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, {n: logging.getLogger(n).level for n in ("kafka", "cr", "x.y")})
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in saved[0]:
        root.addHandler(h)
    root.setLevel(saved[1])
    for name, level in saved[2].items():
        logging.getLogger(name).setLevel(level)


def test_log_level_specs():
    assert parse_log_levels("info") == {"": "INFO"}
    assert parse_log_levels("root=DEBUG, kafka=warn,x.y=ERROR") == {"": "DEBUG", "kafka": "WARNING", "x.y": "ERROR"}
    assert str(parse_log_levels("root=DEBUG,kafka=WARNING")) == "root=DEBUG,kafka=WARNING"
    for bad in ("verbose", "kafka=LOUD", "=INFO", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_log_levels(bad)


def test_json_lines_and_per_logger_levels(restore_logging):
    out = io.StringIO()
    setup_logging(parse_log_levels("root=WARNING,x.y=DEBUG"), "json", stream=out)
    logging.getLogger("x.y").debug("hello %s", "there")
    logging.getLogger("cr").info("hidden")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("cr").error("failed", exc_info=True)
    docs = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(d["logger"], d["level"], d["msg"]) for d in docs] == [
        ("x.y", "DEBUG", "hello there"),
        ("cr", "ERROR", "failed"),
    ]
    assert "ValueError: boom" in docs[1]["exc"]


def test_kafka_connection_refused_spam_is_quieted_by_default(restore_logging):
    out = io.StringIO()
    setup_logging("INFO", "text", stream=out)
    kafka = logging.getLogger("kafka.net.manager")
    kafka.error("Connection failed: KafkaConnectionError: 111 ECONNREFUSED")
    kafka.info("Attempting bootstrap to bootstrap-0 at 127.0.0.1:1")
    kafka.error("Authentication failed")
    assert out.getvalue().count("\n") == 1
    assert "Authentication failed" in out.getvalue()
    out = io.StringIO()
    setup_logging("root=INFO,kafka=INFO", "text", stream=out)  # named: nothing is dropped
    kafka.error("Connection failed: KafkaConnectionError: 111 ECONNREFUSED")
    assert "ECONNREFUSED" in out.getvalue()


def test_durations_and_ports():
    assert duration("500ms") == 0.5
    assert duration("10s") == 10
    assert duration("1m") == 60
    assert duration("1.5") == 1.5
    assert duration("2h") == 7200
    for bad in ("0", "-1s", "soon", "10 parsecs", "400d"):
        with pytest.raises(argparse.ArgumentTypeError):
            duration(bad)
    assert port("9092") == 9092
    for bad in ("0", "99999", "http"):
        with pytest.raises(argparse.ArgumentTypeError):
            port(bad)


def test_last_error_line_of_a_member_log(tmp_path):
    text = "2026-11-23 21:14:29,052 ERROR cr_consumer.runtime.member.process [MainThread] x.py: build(ctx) returned int"
    assert _error_record(text) == ("cr_consumer.runtime.member.process", "x.py: build(ctx) returned int")
    assert _error_record("2026-11-23 21:14:29,052 INFO a [T] fine") is None
    assert _error_record("    raise ERROR here") is None  # a traceback line
    assert _error_record(json.dumps({"level": "ERROR", "logger": "l", "msg": "bad"})) == ("l", "bad")
    assert _error_record(json.dumps({"level": "INFO", "msg": "ok"})) is None
    region = Region("examples.wordcount", members=1, bootstrap="127.0.0.1:1", state_dir=tmp_path)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "member-0.log").write_text(
        "2026-11-23 21:18:50,829 ERROR cr_consumer.runtime.member.process [MainThread] member-0: the Kafka source "
        "could not start (bootstrap 127.0.0.1:1)\nTraceback (most recent call last):\n  ERROR x\n"
        "2026-11-23 21:18:50,852 ERROR cr_consumer.operator.event_thread [cr-event-member-0] member-0: cannot create it\n"
    )
    assert region.last_error("member-0") == "member-0: the Kafka source could not start (bootstrap 127.0.0.1:1)"
    (tmp_path / "logs" / "member-1.log").write_text("2026-11-23 21:18:50,852 ERROR lib [t] other\n")
    assert region.last_error("member-1") == "other"
    assert region.last_error("member-2") is None


@pytest.mark.parametrize(
    ("key", "instead"),
    [
        ("sasl.jaas.config", "sasl.plain.username"),
        ("ssl.truststore.location", "ssl.cafile"),
        ("ssl.keystore.location", "ssl.certfile and ssl.keyfile"),
        ("ssl.key.password", "ssl.password"),
        ("ssl.endpoint.identification.algorithm", "ssl.check.hostname"),
    ],
)
def test_jvm_only_property_names_the_kafka_python_equivalent(key, instead):
    with pytest.raises(PropertyError, match=key.replace(".", r"\.")) as info:
        check_name(key, clients={ClientKind.KAFKA_PYTHON}, reserved={})
    assert instead in str(info.value)


def test_kafka_python_security_names_pass():
    for key in (
        "security.protocol",
        "sasl.mechanism",
        "sasl.plain.username",
        "sasl.plain.password",
        "ssl.cafile",
        "ssl.certfile",
        "ssl.keyfile",
        "ssl.check.hostname",
    ):
        check_name(key, clients={ClientKind.KAFKA_PYTHON}, reserved={})


def test_pipeline_specs():
    assert split_spec("examples.wordcount") == ("examples.wordcount", "build")
    assert split_spec("examples.wordcount:make") == ("examples.wordcount", "make")
    assert split_spec("dir/p.py:make") == ("dir/p.py", "make")
    assert default_stem("examples.wordcount:make") == default_stem("examples/wordcount.py") == "wordcount"
    with pytest.raises(SettingsError):
        split_spec("examples.wordcount:not-a-name")
