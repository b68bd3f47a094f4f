"""Member names are unique in a region: a second live process with a name already
in use is refused at start-up with a clear error (exit code 2), while a member
restarted after kill -9 takes its name over at once."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from cr_consumer.kafka.properties import encode_for_stdin
from cr_consumer.runtime.runner.region_runner import Region
from cr_consumer.testing.kafka_util import create_topic

from support.paths import REPO as ROOT

pytestmark = pytest.mark.slow

PASSTHROUGH = """
from cr_consumer.runtime import KafkaSource, Pipeline

def build(ctx):
    return (Pipeline(KafkaSource(topics=[ctx.param("topic")], options={"start_position": "earliest"}))
            .sink(ctx.file_sink()))
"""


def test_duplicate_member_name_refused_at_start_up(bootstrap, names, tmp_path):
    topic = names.topic()
    create_topic(bootstrap, topic, 2)
    pipeline = tmp_path / "dup_names.py"
    pipeline.write_text(PASSTHROUGH)
    with Region(
        str(pipeline),
        members=1,
        bootstrap=bootstrap,
        output_dir=tmp_path / "out",
        state_dir=tmp_path / "state",
        period_s=0.5,
        member_timeout_s=2.0,
        params={"topic": topic},
        kafka={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
    ) as region:
        region.wait_until(lambda s: s.phase == "RUNNING" and "member-0" in s.members, timeout=60)
        holder_pid = region.pids()["member-0"]
        cmd = region._command("member-0", 1)  # the same name, group and settings as the running member
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        t0 = time.monotonic()
        dup = subprocess.run(
            cmd,
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            input=encode_for_stdin(region.kafka).decode(),
        )  # as the runner hands them
        took = time.monotonic() - t0
        assert dup.returncode == 2, dup.stdout[-2000:] + dup.stderr[-2000:]
        log = dup.stdout + dup.stderr
        assert "member name 'member-0' is already used by a live member" in log
        assert f"pid {holder_pid}" in log
        assert "names must be unique" in log
        assert took < 2.0 + 1.0 + 15.0  # member_timeout_s + DUPLICATE_GRACE_S + process start
        status = region.status()
        assert status.members["member-0"].pid == holder_pid  # the holder kept its place
        # a restart after kill -9 takes the name over without waiting for the timeout
        region.kill("member-0")
        region.wait_until(
            lambda s: (
                (m := s.members.get("member-0")) is not None
                and m.pid not in (None, holder_pid)
                and s.phase == "RUNNING"
            ),
            timeout=30,
        )
        assert region.restarts()["member-0"] == 1
        assert not region.failed
