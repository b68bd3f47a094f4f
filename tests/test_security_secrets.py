"""Kafka secrets stay out of command lines, reprs and logs; --kafka-config and env: references."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cr_consumer.kafka import properties
from cr_consumer.kafka.kafka_python.properties import kafka_python_config
from cr_consumer.operator.config import OperatorConfig
from cr_consumer.runtime.member.setup import MemberSettings
from cr_consumer.spark.options import parse_options

SECRET = "s3cr3t-Pa55word"
SECRET_PROPS = {
    "sasl.plain.password": SECRET,
    "ssl.password": SECRET + "-ssl",
    "sasl.oauth.token.provider": "not-a-string-but-secret",
}


@pytest.mark.parametrize(
    "key",
    [
        "sasl.plain.password",
        "sasl.jaas.config",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.truststore.password",
        "sasl.oauthbearer.client.secret",
        "ssl.keystore.key",
        "ssl_password",
        "sasl.oauthbearer.token.endpoint.credentials",
    ],
)
def test_secret_keys_are_recognised(key):
    assert properties.is_secret(key)


@pytest.mark.parametrize("key", ["sasl.plain.username", "session.timeout.ms", "ssl.keyfile", "security.protocol"])
def test_ordinary_keys_are_not_secret(key):
    assert not properties.is_secret(key)


def test_operator_config_repr_redacts_secrets():
    cfg = OperatorConfig(
        bootstrap_servers="b:9092",
        group_id="g",
        operator_name="op",
        topics=["t"],
        consumer_properties={"sasl.plain.password": SECRET, "sasl.plain.username": "alice", "session.timeout.ms": 6000},
    )
    text = repr(cfg)
    assert SECRET not in text
    assert "alice" in text
    assert "6000" in text
    assert properties.REDACTED in text
    assert kafka_python_config(cfg.client_properties())["sasl_plain_password"] == SECRET  # the consumer still gets it


def test_spark_options_repr_redacts_secrets():
    opts = parse_options(
        {
            "kafka.bootstrap.servers": "b:9092",
            "kafka.group.id": "g",
            "subscribe": "t",
            "coordinator": "tcp://127.0.0.1:1",
            "kafka.sasl.plain.password": SECRET,
            "kafka.sasl.plain.username": "alice",
        }
    )
    assert SECRET not in repr(opts)
    assert SECRET not in str(opts)
    assert "alice" in repr(opts)
    assert opts.consumer_properties["sasl.plain.password"] == SECRET  # the consumers still get it


def test_member_settings_repr_redacts_secrets():
    s = MemberSettings(
        pipeline="p",
        bootstrap="b:1",
        coordinator="tcp://127.0.0.1:1",
        group="g",
        member="m",
        output_dir="o",
        state_dir="s",
        region_index=0,
        region={},
        params={},
        kafka={"sasl.plain.password": SECRET},
    )
    assert SECRET not in repr(s)


def test_env_reference_is_resolved_and_a_missing_one_is_named():
    props = properties.resolve_env(
        {"sasl.plain.password": "env:KAFKA_PW", "session.timeout.ms": "6000"}, {"KAFKA_PW": "123456"}
    )
    assert props == {"sasl.plain.password": "123456", "session.timeout.ms": 6000}  # a secret stays a string
    with pytest.raises(properties.KafkaPropertiesError, match="KAFKA_MISSING is not set") as err:
        properties.resolve_env({"sasl.plain.password": "env:KAFKA_MISSING"}, {})
    assert "sasl.plain.password" in str(err.value)


def test_properties_file_format(tmp_path):
    f = tmp_path / "client.properties"
    f.write_text(
        "# comment\n! another\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism : PLAIN\n"
        "session.timeout.ms 6000\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        '    username="alice" \\\n'
        '    password="x\\u00e9y";\n'
        "empty=\n"
    )
    f.chmod(0o600)
    props = properties.load_properties_file(f)
    assert props == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "session.timeout.ms": "6000",
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="alice" password="xéy";',
        "empty": "",
    }


def test_properties_file_with_a_secret_readable_by_others_is_refused(tmp_path):
    f = tmp_path / "client.properties"
    f.write_text(f"sasl.plain.password={SECRET}\n")
    f.chmod(0o644)
    with pytest.raises(properties.KafkaPropertiesError, match="chmod 600") as err:
        properties.load_properties_file(f)
    assert SECRET not in str(err.value)


def test_stdin_document_round_trip_and_bounds():
    props = {"sasl.plain.password": SECRET, "session.timeout.ms": 6000}
    assert properties.read_stdin(io.BytesIO(properties.encode_for_stdin(props))) == props
    with pytest.raises(properties.KafkaPropertiesError):
        properties.read_stdin(io.BytesIO(b'{"version": 1, "kafka": {"a": [1]}}'))
    with pytest.raises(properties.KafkaPropertiesError):
        properties.read_stdin(io.BytesIO(b"x" * (properties.MAX_PROPERTIES_BYTES + 10)))


def _cmdlines() -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):
                out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
    return out


def test_run_never_puts_a_secret_on_a_member_command_line(tmp_path, bootstrap, names):
    """crkafka run with --kafka-config and an env: reference: members start with the
    properties (they reach the consumer), and no process's command line holds the secret."""
    repo = Path(__file__).resolve().parents[1]
    conf = tmp_path / "client.properties"
    conf.write_text(f"sasl.plain.password={SECRET}\nsession.timeout.ms=6000\n")
    conf.chmod(0o600)
    env = dict(os.environ, KAFKA_OTHER_SECRET=SECRET + "-env", PYTHONPATH=str(repo))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cr_consumer.cli.main",
            "run",
            str(repo / "examples" / "wordcount.py"),
            "--param",
            f"topic={names.topic()}",
            "--group",
            names.group(),
            "--bootstrap",
            bootstrap,
            "--members",
            "2",
            "--out",
            str(tmp_path / "out"),
            "--state-dir",
            str(tmp_path / "state"),
            "--duration",
            "8",
            "--kafka-config",
            str(conf),
            "--kafka",
            "ssl.password=env:KAFKA_OTHER_SECRET",
            "--kafka",
            "heartbeat.interval.ms=1000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=tmp_path,
    )
    try:
        logs = tmp_path / "state" / "logs"
        deadline = time.monotonic() + 30
        seen_members = False
        while time.monotonic() < deadline and proc.poll() is None:
            lines = [c for c in _cmdlines() if "cr_consumer.cli.member" in c and str(tmp_path) in c]
            assert not any(SECRET in c for c in _cmdlines())
            if len(lines) >= 2:
                seen_members = True
                assert all("--kafka-stdin" in c for c in lines)
                break
            time.sleep(0.1)
        assert seen_members, "members never started"
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = out.decode(errors="replace") + "".join(p.read_text(errors="replace") for p in logs.glob("*.log"))
    assert SECRET not in text
    assert "member-0" in text


def test_run_checks_file_and_command_line_properties_together(tmp_path, bootstrap, names):
    """The file's and the items' properties are one set, checked before any member
    starts: a heartbeat above the session timeout (one from each source) is refused
    by the parent, naming both values, and the secret appears nowhere."""
    repo = Path(__file__).resolve().parents[1]
    conf = tmp_path / "client.properties"
    conf.write_text(f"session.timeout.ms=6000\nsasl.plain.password={SECRET}\n")
    conf.chmod(0o600)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "cr_consumer.cli.main",
            "run",
            str(repo / "examples" / "wordcount.py"),
            "--param",
            f"topic={names.topic()}",
            "--bootstrap",
            bootstrap,
            "--members",
            "1",
            "--out",
            str(tmp_path / "out"),
            "--state-dir",
            str(tmp_path / "state"),
            "--duration",
            "60",
            "--kafka-config",
            str(conf),
            "--kafka",
            "heartbeat.interval.ms=7000",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(repo)),
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "heartbeat.interval.ms (7000) must be lower than session.timeout.ms (6000)" in r.stderr
    assert not (tmp_path / "state" / "logs" / "member-0.log").exists()  # refused before spawning
    assert SECRET not in r.stdout + r.stderr


def test_member_refuses_a_missing_env_reference(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "cr_consumer.cli.member",
            "examples/wordcount.py",
            "--coordinator",
            "tcp://127.0.0.1:1",
            "--bootstrap",
            "127.0.0.1:1",
            "--kafka",
            "sasl.plain.password=env:NO_SUCH_VARIABLE_X",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert r.returncode == 2
    assert "NO_SUCH_VARIABLE_X is not set" in r.stdout + r.stderr
