"""``cr-coordinator``'s flags are checked up front: every number is bounded, and a
bad one is a usage error naming the flag, before the state dir is touched."""

from __future__ import annotations

import pytest

from coordinator.cli.checks import _check
from coordinator.cli.flags import build_parser, limits_from_args
from coordinator.protocol.wire.envelope import MAX_FRAME_LIMIT_BYTES, MIN_FRAME_LIMIT_BYTES
from coordinator.server.limits import MAX_LIMIT


def _parse(tmp_path, *flags: str):
    parser = build_parser()
    args = parser.parse_args(["--state-dir", str(tmp_path / "state"), *flags])
    _check(args, parser)
    return args


@pytest.mark.parametrize("value", [MIN_FRAME_LIMIT_BYTES - 1, MAX_FRAME_LIMIT_BYTES + 1, 2**80])
def test_max_frame_bytes_out_of_range_is_a_usage_error(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as exc:
        _parse(tmp_path, "--max-frame-bytes", str(value))
    assert exc.value.code == 2
    assert "--max-frame-bytes" in capsys.readouterr().err
    assert not (tmp_path / "state").exists()


def test_max_frame_bytes_in_range_is_kept(tmp_path):
    assert _parse(tmp_path, "--max-frame-bytes", str(MAX_FRAME_LIMIT_BYTES)).max_frame_bytes == MAX_FRAME_LIMIT_BYTES


@pytest.mark.parametrize("flag", ["--max-groups", "--max-pending-merge-bytes", "--max-members-per-group"])
def test_limit_flags_are_bounded(tmp_path, capsys, flag):
    with pytest.raises(SystemExit) as exc:
        _parse(tmp_path, flag, str(MAX_LIMIT + 1))
    assert exc.value.code == 2
    assert flag in capsys.readouterr().err
    args = _parse(tmp_path, flag, str(MAX_LIMIT))
    assert MAX_LIMIT in _limit_values(args)


def _limit_values(args) -> list[int]:
    limits = limits_from_args(args)
    return [limits.max_groups, limits.max_pending_merge_bytes, limits.max_members_per_group]


_KAFKA = ("--state", "kafka", "--kafka-bootstrap", "127.0.0.1:9092", "--log-topic", "coord-log")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--state", "kafka"), "--state kafka needs --kafka-bootstrap and --log-topic"),
        (("--log-topic", "coord-log"), "--log-topic need --state kafka"),
        (("--kafka-bootstrap", "h:1"), "--kafka-bootstrap need --state kafka"),
        ((*_KAFKA, "--truncate-corrupt"), "does not apply to --state kafka"),
        (("--state", "kafka", "--kafka-bootstrap", "nohost", "--log-topic", "t"), "HOST:PORT"),
        (("--state", "kafka", "--kafka-bootstrap", "h:1", "--log-topic", "a/b"), "log topic"),
        ((*_KAFKA, "--log-replication-factor", "1"), "min_insync_replicas 2 exceeds replication_factor 1"),
        ((*_KAFKA, "--log-min-insync-replicas", "0"), "--log-min-insync-replicas"),
        (("--standby",), "--standby need --state kafka"),
        ((*_KAFKA, "--log-lease", "2h"), "lease_s must be a number of seconds"),
        (("--advertise", "tcp://h:1"), "--advertise need --state kafka"),
        ((*_KAFKA, "--bind", "tcp://*:5570", "--allow-remote"), "give --advertise"),
        ((*_KAFKA, "--bind", "tcp://0.0.0.0:5570", "--allow-remote"), "give --advertise"),
        ((*_KAFKA, "--advertise", "http://h:1"), "--advertise: coordinator endpoint"),
        ((*_KAFKA, "--advertise", "tcp://a:1,tcp://b:2"), "--advertise: coordinator endpoint"),
    ],
)
def test_kafka_state_flags_are_checked_together(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exc:
        _parse(tmp_path, *flags)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "state").exists()


def test_kafka_state_flags_build_the_log_settings_with_production_defaults(tmp_path):
    settings = _parse(tmp_path, *_KAFKA).kafka_settings
    assert (settings.bootstrap, settings.topic, settings.replication_factor, settings.min_insync_replicas) == (
        "127.0.0.1:9092",
        "coord-log",
        3,
        2,
    )
    assert settings.lease_s == 5.0
    assert not _parse(tmp_path, *_KAFKA).standby
    assert _parse(tmp_path, *_KAFKA, "--standby", "--log-lease", "2s").kafka_settings.lease_s == 2.0
    assert _parse(tmp_path).kafka_settings is None
    wildcard = _parse(tmp_path, *_KAFKA, "--bind", "tcp://*:5570", "--allow-remote", "--advertise", "tcp://h:5570")
    assert wildcard.advertise == "tcp://h:5570"


def test_resolve_kafka_config_is_loaded_and_checked_at_parse(tmp_path, capsys):
    config = tmp_path / "resolve-kafka.json"
    config.write_text('{"security_protocol": "SSL", "ssl_cafile": "/etc/ca.pem"}')
    config.chmod(0o600)
    args = _parse(tmp_path, "--resolve-kafka-config", str(config))
    assert args.resolve_kafka_config.settings("kafka:9093")["ssl_cafile"] == "/etc/ca.pem"
    assert _parse(tmp_path).resolve_kafka_config is None
    config.chmod(0o640)
    with pytest.raises(SystemExit):
        _parse(tmp_path, "--resolve-kafka-config", str(config))
    assert "chmod 600" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("kafka-sent", "is not STEP:ACTION"),
        ("", "is not STEP:ACTION"),
        ("kafka-snet:pause", "unknown step 'kafka-snet'"),
        (":pause", "unknown step ''"),
        ("KAFKA-SENT:pause", "unknown step 'KAFKA-SENT'"),
        ("kafka-sent:stop", "unknown action 'stop' (one of pause, crash)"),
        ("kafka-sent:", "unknown action ''"),
        ("kafka-sent:pause:1", "unknown action 'pause:1'"),
        ("kafka-sent: pause", "unknown action ' pause'"),
    ],
)
def test_fault_point_is_checked_whole(tmp_path, capsys, value, message):
    with pytest.raises(SystemExit) as exc:
        _parse(tmp_path, *_KAFKA, "--fault-point", value)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--fault-point" in err
    assert message in err
    assert not (tmp_path / "state").exists()


def test_fault_point_names_every_crash_point_and_is_off_by_default(tmp_path):
    from coordinator.store.fault_point import FaultAction, FaultPoint
    from coordinator.store.kafka.kafka_log import KAFKA_CRASH_STEPS
    from coordinator.store.log.segment import CRASH_STEPS

    assert _parse(tmp_path, *_KAFKA).fault_point is None
    for step in (*KAFKA_CRASH_STEPS, *CRASH_STEPS):
        assert _parse(tmp_path, "--fault-point", f"{step}:crash").fault_point == FaultPoint(step, FaultAction.CRASH)
    assert str(_parse(tmp_path, "--fault-point", "kafka-sent:pause").fault_point) == "kafka-sent:pause"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--compact-dead-ratio", "0"), "outside (0, 1)"),
        (("--compact-dead-ratio", "1"), "outside (0, 1)"),
        (("--compact-dead-ratio", "nan"), "outside (0, 1)"),
        (("--compact-dead-ratio", "half"), "is not a number"),
        (("--compact-min-bytes", "-1"), "outside 0.."),
    ],
)
def test_compaction_thresholds_are_bounded(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exc:
        _parse(tmp_path, *flags)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    args = _parse(tmp_path, "--compact-min-bytes", "0", "--compact-dead-ratio", "0.001")
    assert (args.compact_min_bytes, args.compact_dead_ratio) == (0, 0.001)
    assert (_parse(tmp_path).compact_min_bytes, _parse(tmp_path).compact_dead_ratio) == (1 << 20, 0.5)
