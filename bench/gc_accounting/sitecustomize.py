"""GC accounting for benchmarks (not project code): put this directory first on
``PYTHONPATH`` and set ``CR_GC_ACCOUNTING_DIR``; every Python process started
then times each cyclic collection in its thread's CPU time (``gc.callbacks``)
and appends its running totals, about once a second, to
``$CR_GC_ACCOUNTING_DIR/gc-<pid>.jsonl``. ``summarise.py`` reads them.

    CR_GC_ACCOUNTING_DIR=/tmp/gc PYTHONPATH=bench/gc_accounting \\
        .venv/bin/python bench/bench_pipeline.py ... --before-tree DIR
    .venv/bin/python bench/gc_accounting/summarise.py /tmp/gc
"""

import gc
import json
import os
import sys
import time

_DIR = os.environ.get("CR_GC_ACCOUNTING_DIR", "")
#: Seconds between two appended lines (a line is written only at the end of a collection).
_EVERY_S = 1.0

if _DIR:
    _started: dict[int, float] = {}
    _totals = {g: [0, 0.0] for g in range(3)}  # generation -> [collections, thread CPU seconds]
    _last = [0.0]

    def _account(phase: str, info: dict) -> None:
        generation = info["generation"]
        if phase == "start":
            _started[generation] = time.thread_time()
            return
        total = _totals[generation]
        total[0] += 1
        total[1] += time.thread_time() - _started.get(generation, time.thread_time())
        now = time.monotonic()
        if now - _last[0] < _EVERY_S:
            return
        _last[0] = now
        module = sys.modules.get("cr_consumer")
        line = {
            "t": time.time(),
            "argv": sys.argv[-3:],
            "totals": _totals,
            "frozen": gc.get_freeze_count(),
            "thresholds": gc.get_threshold(),
            "tree": getattr(module, "__file__", None),
        }
        try:
            with open(os.path.join(_DIR, f"gc-{os.getpid()}.jsonl"), "a") as f:
                f.write(json.dumps(line) + "\n")
        except OSError:  # accounting only: the process goes on
            pass

    gc.callbacks.append(_account)
