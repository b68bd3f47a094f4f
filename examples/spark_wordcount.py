"""Kafka -> Spark word count -> exactly-once output, on the ``crkafka`` source.

Two sub-commands:

``run``   the streaming query. Reads ``--topic`` through ``crkafka`` (the
          driver holds the group membership and commits offsets to Kafka at
          every micro-batch; the executors read each batch's offset ranges), counts
          the words of each micro-batch, and writes one JSON file per batch id
          into ``--out`` (``batch-<id>.json``: the batch's word counts and the
          offsets of its records). The write is a temp file + rename named by
          the batch id, so a batch replayed after a crash overwrites its own
          file: output is exactly once. Runs until SIGTERM/SIGINT, or until
          ``--expect`` records are in the output and the group's committed
          offsets have caught up (``--exit-when-done``).

``demo``  the whole story on this machine: an embedded broker, the coordinator
          as its own process, N input lines, the query started, killed with
          ``kill -9`` half way through (in the middle of a batch), restarted from
          the same checkpoint location, then verification that the output holds
          every input record exactly once, and the group's committed offsets as
          any Kafka tool (KafkaAdminClient) sees them.

    python examples/spark_wordcount.py demo --records 20000
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]

#: Bound on waiting for the restarted query to finish the input, so a stuck
#: query fails the demo instead of hanging it.
FINISH_TIMEOUT_S = 240.0
#: Bound on waiting for the first query to reach the middle of the input.
HALFWAY_TIMEOUT_S = 180.0


def line_for(i: int) -> bytes:
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(i % 3 + 1)).encode()


# --------------------------------------------------------------------------- run
def output_state(out: Path) -> tuple[collections.Counter, dict[tuple[str, int], list[int]]]:
    """Sum of word counts, and (topic, partition) -> every offset in the output."""
    counts: collections.Counter = collections.Counter()
    offsets: dict[tuple[str, int], list[int]] = collections.defaultdict(list)
    for path in sorted(out.glob("batch-*.json")):
        doc = json.loads(path.read_text())
        counts.update(doc["counts"])
        for key, offs in doc["offsets"].items():
            topic, _, part = key.rpartition(":")
            offsets[(topic, int(part))].extend(offs)
    return counts, offsets


def write_batch(out: Path, batch_id: int, doc: dict) -> None:
    tmp = out / f".batch-{batch_id:06d}.tmp"
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, out / f"batch-{batch_id:06d}.json")


def make_sink(out: Path, delay_s: float):
    from pyspark.sql import functions as F

    def sink(df, batch_id: int) -> None:
        (out / f"started-{batch_id:06d}").touch()
        rows = df.select("topic", "partition", "offset").collect()
        if not rows:
            return
        if delay_s:
            time.sleep(delay_s)  # demo/test only: widens the window for a kill mid-batch
        words = df.select(F.explode(F.split(F.col("value").cast("string"), " ")).alias("word"))
        counts = {r["word"]: r["count"] for r in words.groupBy("word").count().collect()}
        offsets: dict[str, list[int]] = collections.defaultdict(list)
        for r in rows:
            offsets[f"{r['topic']}:{r['partition']}"].append(r["offset"])
        write_batch(out, batch_id, {"batch_id": batch_id, "rows": len(rows), "counts": counts, "offsets": offsets})

    return sink


def spark_session():
    from cr_consumer.spark.session import local_session

    return local_session("crkafka-wordcount")


def committed_total(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets of ``topic``, as any Kafka tool sees them."""
    from cr_consumer.testing.kafka_util import committed_offsets

    return committed_offsets(bootstrap, group, topic)


def cmd_run(args) -> int:
    from cr_consumer.spark.session import register

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spark = spark_session()
    register(spark)
    reader = (
        spark.readStream.format("crkafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("kafka.group.id", args.group)
        .option("subscribe", args.topic)
        .option("coordinator", args.coordinator)
        .option("members", args.members)
        .option("kafka.client", args.kafka_client)
        .option("startingOffsets", args.starting_offsets)
        .option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
    )
    if args.session_timeout_ms is not None:
        reader = reader.option("kafka.session.timeout.ms", args.session_timeout_ms).option(
            "kafka.heartbeat.interval.ms", max(args.session_timeout_ms // 6, 100)
        )
    query = (
        reader.load()
        .writeStream.foreachBatch(make_sink(out, args.sink_delay))
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime=f"{args.trigger_ms} milliseconds")
        .start()
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"query {query.id} started", flush=True)
    rc = 0
    try:
        while not stop.wait(0.5):
            if query.exception() is not None:
                print(f"query failed: {query.exception()}", file=sys.stderr, flush=True)
                rc = 1
                break
            if args.exit_when_done and args.expect:
                _, offsets = output_state(out)
                if sum(len(v) for v in offsets.values()) >= args.expect:
                    done = {p: max(v) + 1 for (t, p), v in offsets.items()}
                    committed = committed_total(args.bootstrap, args.group, args.topic)
                    if all(committed.get(p) == n for p, n in done.items()):
                        print(
                            f"done: {args.expect} records out, committed {dict(sorted(committed.items()))}", flush=True
                        )
                        break
    finally:
        query.stop()
        spark.stop()
    return rc


# -------------------------------------------------------------------------- demo
def run_query_process(
    args, workdir: Path, *, sink_delay: float, exit_when_done: bool, log_name: str, starting_offsets: str = "earliest"
) -> subprocess.Popen:
    cmd = [
        sys.executable,
        __file__,
        "run",
        "--bootstrap",
        args.bootstrap,
        "--coordinator",
        args.coordinator,
        "--topic",
        args.topic,
        "--group",
        args.group,
        "--members",
        str(args.members),
        "--out",
        str(workdir / "out"),
        "--checkpoint",
        str(workdir / "checkpoint"),
        "--sink-delay",
        str(sink_delay),
        "--max-offsets-per-trigger",
        str(args.max_offsets_per_trigger),
        "--expect",
        str(args.records),
        "--starting-offsets",
        starting_offsets,
    ]
    if args.session_timeout_ms is not None:
        cmd += ["--session-timeout-ms", str(args.session_timeout_ms)]
    if exit_when_done:
        cmd.append("--exit-when-done")
    with open(workdir / log_name, "w") as log:  # the child keeps its own descriptor
        # own session: kill -9 of the group takes the driver, its JVM and the source runner
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def wait_until(predicate, timeout_s: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"query process exited with {proc.returncode} while waiting for {what}")
        time.sleep(0.2)
    raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")


def mid_batch(out: Path, total: int) -> bool:
    """A batch has started but not written, and some (not all) records are out."""
    _, offsets = output_state(out)
    n = sum(len(v) for v in offsets.values())
    if not (0 < n < total):
        return False
    started = {p.name.split("-")[1] for p in out.glob("started-*")}
    written = {p.name.split("-")[1].split(".")[0] for p in out.glob("batch-*.json")}
    return bool(started - written) and n >= total // 3


def verify(out: Path, total: int, topic: str) -> dict:
    counts, offsets = output_state(out)
    seen = collections.Counter((t, p, o) for (t, p), offs in offsets.items() for o in offs)
    dups = [k for k, c in seen.items() if c > 1]
    per_part = collections.Counter(p for (_t, p, _o) in seen)
    expected_counts = collections.Counter(w for i in range(total) for w in line_for(i).decode().split())
    return {
        "records_out": sum(seen.values()),
        "distinct": len(seen),
        "duplicates": len(dups),
        "gaps": sum(max(o for (_t, q, o) in seen if q == p) + 1 - n for p, n in per_part.items()),
        "counts_match": counts == expected_counts,
        "per_partition": dict(sorted(per_part.items())),
    }


def kill_restart_verify(args, workdir: Path) -> dict:
    """Run the query, kill -9 it in the middle of a batch, restart it from the
    same checkpoint location, wait until it is done, and verify the output.

    ``args`` holds bootstrap, coordinator, topic, group, members, records,
    max_offsets_per_trigger and session_timeout_ms; the topic holds
    ``line_for(i)`` for i < records.
    """
    out = workdir / "out"
    out.mkdir(parents=True, exist_ok=True)
    first = run_query_process(args, workdir, sink_delay=2.0, exit_when_done=False, log_name="query-1.log")
    try:
        wait_until(lambda: mid_batch(out, args.records), HALFWAY_TIMEOUT_S, "the middle of a batch", first)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver, its JVM and the source runner
        first.wait()
    before = verify(out, args.records, args.topic)
    print(f"kill -9 of the query in the middle of a batch: {before['records_out']} records were out", flush=True)

    second = run_query_process(args, workdir, sink_delay=0.0, exit_when_done=True, log_name="query-2.log")
    try:
        rc = second.wait(timeout=FINISH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        rc = None
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait()
    result = verify(out, args.records, args.topic)
    result.update(
        killed_at=before["records_out"],
        restart_rc=rc,
        committed=committed_total(args.bootstrap, args.group, args.topic),
    )
    result["ok"] = (
        rc == 0
        and result["records_out"] == args.records == result["distinct"]
        and result["duplicates"] == 0
        and result["gaps"] == 0
        and result["counts_match"]
        and result["committed"] == result["per_partition"]
    )
    return result


def cmd_demo(args) -> int:
    from coordinator.launcher import CoordinatorProcess
    from cr_consumer.testing.broker import EmbeddedBroker
    from cr_consumer.testing.kafka_util import create_topic, produce, unique_name

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="crkafka-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    with (
        EmbeddedBroker(log_path=workdir / "broker.log") as broker,
        CoordinatorProcess(state_dir=workdir / "coordinator") as coord,
    ):
        args.bootstrap, args.coordinator = broker.bootstrap, coord.endpoint
        args.topic, args.group = unique_name("words"), unique_name("wordcount")
        print(f"broker {args.bootstrap}, coordinator {args.coordinator} (pid {coord.pid}), workdir {workdir}")
        create_topic(args.bootstrap, args.topic, partitions=args.partitions)
        produce(args.bootstrap, args.topic, (line_for(i) for i in range(args.records)))
        print(f"produced {args.records} lines to {args.topic} ({args.partitions} partitions)", flush=True)
        result = kill_restart_verify(args, workdir)
    print(f"restarted query exited with {result['restart_rc']}")
    print("verification: " + json.dumps({k: v for k, v in result.items() if k != "committed"}))
    print(f"committed offsets of group {args.group} (KafkaAdminClient): {dict(sorted(result['committed'].items()))}")
    print("EXACTLY ONCE: OK" if result["ok"] else f"EXACTLY ONCE: FAILED (logs in {workdir})")
    return 0 if result["ok"] else 1


def demo_part(workdir: Path | None = None, records: int = 20000) -> bool:
    """The Spark part of ``make demo`` (examples/demo.py can append it to its PARTS)."""
    print("== Spark: crkafka source -> word count -> exactly-once files; kill -9 half way ==", flush=True)
    argv = ["demo", "--records", str(records)] + (["--workdir", str(workdir)] if workdir else [])
    return main(argv) == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the streaming query")
    for name in ("bootstrap", "coordinator", "topic", "group", "out", "checkpoint"):
        run.add_argument(f"--{name}", required=True)
    demo = sub.add_parser("demo", help="kill -9 half way, restart, verify exactly once")
    demo.add_argument("--records", type=int, default=20000)
    demo.add_argument("--partitions", type=int, default=4)
    demo.add_argument("--workdir", default=None)
    for p in (run, demo):
        p.add_argument("--members", type=int, default=2)
        p.add_argument("--max-offsets-per-trigger", type=int, default=2000)
        p.add_argument(
            "--session-timeout-ms",
            type=int,
            default=None,
            help="the members' kafka.session.timeout.ms (default: the source's)",
        )
    run.add_argument(
        "--kafka-client",
        choices=("librdkafka", "kafka-python"),
        default="librdkafka",
        help="the executors' Kafka library (the source option kafka.client)",
    )
    run.add_argument("--sink-delay", type=float, default=0.0, help="seconds each non-empty batch sleeps (tests)")
    run.add_argument("--trigger-ms", type=int, default=200)
    run.add_argument(
        "--starting-offsets",
        default="earliest",
        help="earliest, latest or committed (a second query joining a running group)",
    )
    run.add_argument("--expect", type=int, default=0, help="records expected in the output")
    run.add_argument("--exit-when-done", action="store_true")
    args = parser.parse_args(argv)
    return cmd_run(args) if args.command == "run" else cmd_demo(args)


if __name__ == "__main__":
    sys.exit(main())
