"""CPU per record of the member runtime's own data path, without Kafka.

What a member does with each batch its source hands over
(``Pipeline.process_batch``, which ``Member._submit`` calls -> the exactly-once
``FileSink``: JSON lines, write, incremental fdatasync), plus a drain,
checkpoint, seal, publish and retire (what the ``CommandExecutor`` commands do
with the sink and the checkpoint store) every ``--batches-per-checkpoint`` batches, as a 1 s
period does at ~70k records/s. The input is kafka-python ``ConsumerRecord``
batches of 500 x 100-byte values (what the source hands over), built before
the clock starts. CPU is this process's user + system time (getrusage) over
the timed part (the user/system split is the kernel's tick-sampled estimate),
and the thread's exact CPU time inside ``process_batch`` alone (the JSON lines,
the write and the incremental fdatasync; ``thread_time``); the figures are us
per record.

Same-run before/after: ``--before-tree DIR`` runs every trial a second time in
a child process importing DIR's code; the order alternates trial by trial and
every trial is a fresh process. The table gives the median over the trials.

    .venv/bin/python bench/bench_member_path.py --trials 7 --before-tree DIR [--with-event-thread]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: ``--with-event-thread``: a second thread builds each batch (with ~2 us of
#: Python work per record, standing in for the fetch parsing) and hands it over
#: through a bounded queue, as the operator's event thread does; the figure is
#: then the whole process's CPU per record, GIL hand-offs included.
THREADED = r"""
import json, os, queue, resource, sys, tempfile, threading, time
from kafka.consumer.fetcher import ConsumerRecord
from cr_consumer.runtime.pipeline.checkpoint_store import DirectoryCheckpointStore
from cr_consumer.runtime.pipeline.sinks import FileSink
from cr_consumer.runtime.pipeline.wiring import KafkaSource, Pipeline

batches, per_checkpoint, size = int(sys.argv[1]), int(sys.argv[2]), 500
work = tempfile.mkdtemp(prefix="bench-member-path-")
sink = FileSink(os.path.join(work, "out"), "member-0")
pipeline = Pipeline(KafkaSource(topics=["t"])).sink(sink)
store = DirectoryCheckpointStore(os.path.join(work, "ck"))
handover: queue.Queue = queue.Queue(maxsize=20)
raw = b"x" * 100

def event():
    for b in range(batches):
        batch = []
        for i in range(size):
            s = 0
            for k in range(12):
                s += k
            batch.append(ConsumerRecord("bench-pipeline-topic", 3, 0, b * size + i, 1_700_000_000_000 + i, 0, None,
                                        bytes(raw[:]), [], None, -1, 100, -1))
        handover.put(batch, timeout=60)
    handover.put(None, timeout=60)

def process():
    seq = done = 0
    while (batch := handover.get(timeout=60)) is not None:
        pipeline.process_batch(batch)
        done += 1
        if done % per_checkpoint == 0:
            seq += 1
            sink.drain()
            store.save(seq, "01-file_sink", sink.checkpoint(seq))
            store.seal(seq)
            sink.notify_checkpoint_complete(seq)
            store.retire(seq - 1)

t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
threads = [threading.Thread(target=event), threading.Thread(target=process)]
for t in threads:
    t.start()
for t in threads:
    t.join(600)
c1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
n = batches * size
print(json.dumps({"batch_cpu_us": float("nan"), "user_us": 1e6 * (c1.ru_utime - c0.ru_utime) / n,
                  "sys_us": 1e6 * (c1.ru_stime - c0.ru_stime) / n, "wall_us": 1e6 * (t1 - t0) / n, "files": 0}))
"""

TRIAL = r"""
import json, os, resource, shutil, sys, tempfile, time
from kafka.consumer.fetcher import ConsumerRecord
from cr_consumer.runtime.pipeline.checkpoint_store import DirectoryCheckpointStore
from cr_consumer.runtime.pipeline.sinks import FileSink
from cr_consumer.runtime.pipeline.wiring import KafkaSource, Pipeline

batches, per_checkpoint, size = int(sys.argv[1]), int(sys.argv[2]), 500
work = tempfile.mkdtemp(prefix="bench-member-path-")
sink = FileSink(os.path.join(work, "out"), "member-0")
pipeline = Pipeline(KafkaSource(topics=["t"])).sink(sink)
store = DirectoryCheckpointStore(os.path.join(work, "ck"))
value = b"x" * 100
data = [[ConsumerRecord("bench-pipeline-topic", b % 2, 0, b * size + i, 1_700_000_000_000 + i, 0, None, value, [],
                        None, -1, 100, -1) for i in range(size)] for b in range(batches)]
seq = 0
clock = time.thread_time  # CLOCK_THREAD_CPUTIME_ID: exact (getrusage splits user/sys by tick samples)
batch_cpu = 0.0
t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
for b, batch in enumerate(data):
    u0 = clock()
    pipeline.process_batch(batch)
    batch_cpu += clock() - u0
    if b % per_checkpoint == per_checkpoint - 1:
        seq += 1
        sink.drain()
        store.save(seq, "01-file_sink", sink.checkpoint(seq))
        store.seal(seq)
        sink.notify_checkpoint_complete(seq)
        store.retire(seq - 1)
c1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
n = batches * size
print(json.dumps({"batch_cpu_us": 1e6 * batch_cpu / n, "user_us": 1e6 * (c1.ru_utime - c0.ru_utime) / n, "sys_us": 1e6 * (c1.ru_stime - c0.ru_stime) / n,
                  "wall_us": 1e6 * (t1 - t0) / n, "files": len(os.listdir(os.path.join(work, "out")))}))
shutil.rmtree(work)
"""


def trial(tree: Path, batches: int, per_checkpoint: int, threaded: bool = False) -> dict:
    # PYTHONSAFEPATH: ``python -c`` would otherwise put the working directory first on sys.path.
    env = dict(
        os.environ,
        PYTHONSAFEPATH="1",
        PYTHONPATH=str(tree) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
    )
    out = subprocess.run(
        [sys.executable, "-c", THREADED if threaded else TRIAL, str(batches), str(per_checkpoint)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    r = json.loads(out.stdout)
    r["cpu_us"] = r["user_us"] + r["sys_us"]
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--batches", type=int, default=600, help="batches of 500 records per trial")
    ap.add_argument("--batches-per-checkpoint", type=int, default=140, help="~70k records per checkpoint")
    ap.add_argument("--before-tree", default=None, metavar="DIR")
    ap.add_argument(
        "--with-event-thread",
        action="store_true",
        help="batches built by a second thread and handed over through a queue (see THREADED)",
    )
    args = ap.parse_args()
    trees = {"this": ROOT} if not args.before_tree else {"before": Path(args.before_tree), "after": ROOT}
    runs: dict[str, list[dict]] = {k: [] for k in trees}
    for t in range(args.trials):
        order = list(trees.items())
        for label, tree in order if t % 2 == 0 else reversed(order):
            r = trial(tree, args.batches, args.batches_per_checkpoint, args.with_event_thread)
            runs[label].append(r)
            print(
                f"trial {t} {label}: cpu {r['cpu_us']:.3f} us/record (user {r['user_us']:.3f}, "
                f"sys {r['sys_us']:.3f}; in process_batch {r['batch_cpu_us']:.3f}), "
                f"wall {r['wall_us']:.3f}",
                flush=True,
            )
    report = {
        label: {
            k: round(statistics.median(r[k] for r in rs), 3) for k in ("cpu_us", "user_us", "sys_us", "batch_cpu_us")
        }
        for label, rs in runs.items()
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
