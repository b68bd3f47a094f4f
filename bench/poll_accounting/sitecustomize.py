"""Counts kafka-python's polls, IO-thread hand-offs and fetch responses per process.

Loaded by every Python process that has this directory first on ``PYTHONPATH``
(``sitecustomize``), active only with ``CR_POLL_ACCOUNTING_DIR`` set: wraps
``KafkaConsumer.poll``, ``NetworkSelector.run`` (a coroutine run on the IO thread
while the caller waits: a hand-off) and ``Fetcher._handle_fetch_response``, and
writes ``<dir>/<pid>.json`` at most once a second while polls return (counts
since the process started, the join and the idle tail included):

    CR_POLL_ACCOUNTING_DIR=/tmp/polls PYTHONPATH=$PWD/bench/poll_accounting PYTHONSAFEPATH=1 \\
        .venv/bin/python bench/bench_pipeline.py --messages 1500000 --rounds 1 --bare-mode group

A bench aid, not part of the package.
"""

import contextlib
import json
import os
import time

OUT = os.environ.get("CR_POLL_ACCOUNTING_DIR")


def _install(out: str) -> None:
    import kafka.consumer.fetcher as fetcher
    import kafka.consumer.group as group
    import kafka.net.selector as selector

    stats: dict = {
        "polls": 0,
        "empty_polls": 0,
        "records": 0,
        "hand_offs": 0,
        "hand_offs_by": {},
        "fetch_responses": 0,
        "fetch_response_bytes": 0,
    }
    last = [0.0]
    poll, run, handle = group.KafkaConsumer.poll, selector.NetworkSelector.run, fetcher.Fetcher._handle_fetch_response

    def counted_poll(self, *args, **kwargs):
        out_records = poll(self, *args, **kwargs)
        n = sum(len(v) for v in out_records.values())
        stats["polls"] += 1
        stats["records"] += n
        stats["empty_polls"] += not n
        stats["fetch_max_bytes"] = self.config.get("fetch_max_bytes")
        now = time.monotonic()
        if now - last[0] > 1.0:
            last[0] = now
            with open(os.path.join(out, f"{os.getpid()}.json"), "w") as f:
                json.dump(stats, f)
        return out_records

    def counted_run(self, coro, *args):
        name = getattr(coro, "__qualname__", type(coro).__name__)
        stats["hand_offs"] += 1
        stats["hand_offs_by"][name] = stats["hand_offs_by"].get(name, 0) + 1
        return run(self, coro, *args)

    def counted_handle(self, node_id, fetch_offsets, send_time, response):
        stats["fetch_responses"] += 1
        stats["fetch_response_bytes"] += sum(len(p.records or b"") for t in response.responses for p in t.partitions)
        return handle(self, node_id, fetch_offsets, send_time, response)

    group.KafkaConsumer.poll = counted_poll
    selector.NetworkSelector.run = counted_run
    fetcher.Fetcher._handle_fetch_response = counted_handle


if OUT:
    with contextlib.suppress(ImportError):  # a process without kafka-python
        _install(OUT)
