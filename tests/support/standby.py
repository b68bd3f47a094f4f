"""Stand-in standby processes for the runner's tests: ``python -c SAY + ...``
programs that speak the standby's side of the hand-over (``handoff.py``) on
the status pipe the runner passes as ``--status-fd N``, as much of it as a
test needs, without the member's imports."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from cr_consumer.runtime.runner.launch import Argv, member_argv

#: A member's pipeline: one Kafka source, a file sink.
PIPELINE = """
from cr_consumer.runtime import KafkaSource, Pipeline

def build(ctx):
    return Pipeline(KafkaSource(topics=["t"])).sink(ctx.file_sink())
"""
#: Region settings for ``member_argv``.
REGION = {
    "mode": "periodic",
    "period_s": 1.0,
    "drain_timeout_s": 30.0,
    "reset_timeout_s": 30.0,
    "max_consecutive_resets": 5,
    "member_timeout_s": 5.0,
}

#: Defines ``say(status, detail='')``: one status line on the status pipe (none without ``--status-fd``).
SAY = (
    "import json, os, sys, time\n"
    "fd = int(sys.argv[sys.argv.index('--status-fd') + 1]) if '--status-fd' in sys.argv else None\n"
    "def say(status, detail=''):\n"
    "    if fd is not None:\n"
    "        os.write(fd, json.dumps({'v': 1, 'status': status, 'detail': detail}).encode() + b'\\n')\n"
)
#: Says ready, then waits, never reading its stdin.
READY_SLEEP = SAY + "say('ready'); time.sleep(60)"


def exits_after_reading(code: int) -> str:
    """Says ready, reads the hand-over line, exits with ``code`` without answering
    (a standby that dies after the write; with ExitCode.CONFIG: one of a version
    without the ``refused`` answer, rejecting the line)."""
    return SAY + f"say('ready'); sys.stdin.buffer.readline(); sys.exit({code})"


def takes_then_exits(code: int, member: str) -> str:
    """Says ready, reads the line, answers ``took``, then exits with ``code`` (a member that dies at once)."""
    return SAY + f"say('ready'); sys.stdin.buffer.readline(); say('took', {member!r}); sys.exit({code})"


#: Says ready, then closes its stdin (no reader: the hand-over's write fails) and waits.
CLOSES_STDIN = SAY + "say('ready'); os.close(0); time.sleep(60)"
#: Never says ready (stopped or wedged in its imports, or an old tree's standby).
NEVER_READY = "import time; time.sleep(60)"


def member_command(tmp_path: Path, pipeline: str, kafka_stdin: bool = False) -> Argv:
    """``crkafka member``'s command line against nothing (no coordinator, no broker):
    a real member that waits to join a coordinator that is not there."""

    def argv(name: str, min_members: int) -> list[str]:
        return member_argv(
            sys.executable,
            pipeline,
            name=name,
            coordinator="tcp://127.0.0.1:1",
            bootstrap="127.0.0.1:1",
            group="g",
            output_dir=str(tmp_path / "out"),
            state_dir=str(tmp_path / "state"),
            region_index=0,
            min_members=min_members,
            region=REGION,
            params={},
            kafka_stdin=kafka_stdin,
        )

    return argv


def gone(pid: int) -> bool:
    """True once ``pid`` is reaped (a zombie still takes signal 0)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
