"""``crkafka run --kafka-client librdkafka``: a region of member processes whose
sources read through librdkafka publishes every record exactly once with the
exactly-once file sink, and stops cleanly."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys

import pytest

from coordinator.common.waiting import WaitTimeout, wait_until
from cr_consumer.testing.kafka_util import create_topic, produce

from support.paths import REPO
from support.region import check_exactly_once, published, write_module

pytestmark = pytest.mark.slow

PASSTHROUGH = '''
from cr_consumer.runtime import KafkaSource, Pipeline

def build(ctx):
    return (Pipeline(KafkaSource(topics=[ctx.param("topic")], options={"start_position": "beginning"}))
            .sink(ctx.file_sink()))
'''
PER_PARTITION = 1500
PARTITIONS = 3


def test_crkafka_run_with_librdkafka_publishes_every_record_exactly_once(bootstrap, names, tmp_path):
    topic = create_topic(bootstrap, names.topic(), partitions=PARTITIONS)
    pipeline = write_module(tmp_path, "passthrough", PASSTHROUGH)
    produce(bootstrap, topic, (b"value-%d" % i for i in range(PER_PARTITION * PARTITIONS)))
    log_path = tmp_path / "run.log"
    total = PER_PARTITION * PARTITIONS
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cr_consumer.cli.main", "run", pipeline, "--members", "2",
             "--bootstrap", bootstrap, "--group", names.group(), "--kafka-client", "librdkafka",
             "--param", f"topic={topic}", "--out", str(tmp_path / "out"), "--state-dir", str(tmp_path / "state"),
             "--period", "0.5", "--duration", "120", "--status-every", "2",
             "--kafka", "session.timeout.ms=6000", "--kafka", "heartbeat.interval.ms=1000"],
            stdout=log_file, stderr=subprocess.STDOUT, text=True, cwd=REPO)
        try:
            with contextlib.suppress(WaitTimeout):  # the assertion below says what was published
                wait_until(lambda: proc.poll() is not None or len(published(tmp_path / "out")) >= total, 60,
                           f"{total} published records or the run's exit", interval=0.2)
            rows = published(tmp_path / "out")
            assert len(rows) >= total, f"{len(rows)} of {total} published; crkafka run said:\n" \
                                       f"{log_path.read_text()[-3000:]}"
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 0, log_path.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    check_exactly_once(published(tmp_path / "out"), topic, {p: PER_PARTITION for p in range(PARTITIONS)})
    for member in ("member-0", "member-1"):
        assert "Kafka client librdkafka" in (tmp_path / "state" / "logs" / f"{member}.log").read_text()
