"""The coordinator's own resolver of Kafka transactions: one worker thread, owned by the region
controller service, that runs :class:`~coordinator.region.abandoned.ResolveJob` s off the loop
thread (a request never waits for a broker).

1. :meth:`TxnWorker.submit` (loop thread) queues a job; the thread starts with the first one.
   The service queues at most one job per region (``AbandonedResolve.running``), and regions are
   bounded (``limits.max_regions``): so is the queue.
2. The thread takes the jobs in turn. For each entry, in order, it checks the job's ``cancel``
   before each Kafka step, then commits every prepared transaction and reads its markers back
   (``coordinator.kafka.transactions.commit_or_raise``: the test broker answers NoError to a
   commit of an aborted transaction, so only a COMMIT marker in every partition counts), then
   fences every transactional id (``fence``: the member's open interval is aborted). Each step
   is bounded (``RESOLVE_DEADLINE_S``, the request timeout of ``txn_client.py``). An entry
   that fails is logged at ERROR naming its member, checkpoint, transactions and the reason, and
   the next entry is tried: the entries are independent.
3. The :class:`~coordinator.region.abandoned.JobOutcome` goes back through ``report``
   (the service's ``call_soon_threadsafe``): the loop thread applies it.
4. :meth:`TxnWorker.stop` (at the server's stop): cancels the running job, ends the thread after
   its Kafka step in flight, waiting at most :data:`STOP_TIMEOUT_S`. Nothing is lost by a stop:
   the entries stay in the region's document until an outcome drops them.

The clients connect to the bootstrap the entry names (``Transactions.bootstrap``, the sink's
cluster) with the coordinator's own client settings (``coordinator/region/txn_client.py``).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from coordinator.protocol.region.transactions import Resolve
from coordinator.region.abandoned import JobOutcome, ResolveJob
from coordinator.region.txn_client import TxnClientConfig

log = logging.getLogger(__name__)

#: How long the idle thread waits for a job before it checks for a stop: bounds :meth:`TxnWorker.stop`
#: when no job runs.
IDLE_POLL_S = 0.5
#: :meth:`TxnWorker.stop` waits this long for the step in flight: one commit with its marker
#: reads is bounded by about twice ``RESOLVE_DEADLINE_S`` (30 s, ``coordinator/kafka/transactions.py``);
#: past it the (daemon) thread is left and the stop goes on, logged.
STOP_TIMEOUT_S = 65.0


class JobCancelled(Exception):
    """The job's ``cancel`` was set (a member joined, or the server stops)."""


#: Resolves one entry whole, or raises (``JobCancelled`` when ``cancel`` is set before a step).
EntryResolver = Callable[[Resolve, threading.Event], None]


def entry_resolver(client: TxnClientConfig) -> EntryResolver:
    """Step 2 for one entry, with ``client``'s connection settings."""

    def resolve(entry: Resolve, cancel: threading.Event) -> None:
        resolve_entry(entry, cancel, client)

    return resolve


def resolve_entry(entry: Resolve, cancel: threading.Event, client: TxnClientConfig) -> None:
    """Step 2 for one entry; raises JobCancelled, or what failed."""
    # kafka-python is imported with the first job: a coordinator without Kafka sinks never loads it
    from coordinator.kafka.transactions import RESOLVE_DEADLINE_S, commit_or_raise, fence

    bootstrap = entry.transactions.bootstrap
    if bootstrap is None:
        raise ValueError("the entry names no cluster")
    settings = client.settings(bootstrap)
    for txn in entry.transactions.prepared:
        if cancel.is_set():
            raise JobCancelled()
        commit_or_raise(settings, entry, txn)
    for transactional_id in entry.transactions.fence:
        if cancel.is_set():
            raise JobCancelled()
        fence(settings, transactional_id, deadline_s=RESOLVE_DEADLINE_S)


def run_job(job: ResolveJob, resolve: EntryResolver) -> JobOutcome:
    """Step 2 for one job (on the worker thread)."""
    resolved: list[Resolve] = []
    failed: dict[str, tuple[Resolve, str]] = {}
    for entry in job.entries:
        what = (
            f"region {job.region}: {entry.member}'s checkpoint {entry.seq} "
            f"({len(entry.transactions.prepared)} prepared: "
            f"{', '.join(t.describe() for t in entry.transactions.prepared[:3]) or 'none'}; "
            f"fence {', '.join(entry.transactions.fence[:4]) or 'none'}; on {entry.transactions.bootstrap})"
        )
        try:
            resolve(entry, job.cancel)
        except JobCancelled:
            log.info("%s: left to the members (a member joined, or the coordinator stops)", what)
            return JobOutcome(job, tuple(resolved), failed, cancelled=True)
        except Exception as exc:  # noqa: BLE001 - reported: logged here, kept in the status, retried
            reason = f"{type(exc).__name__}: {exc}"[:1000]
            log.error("%s: the coordinator could not resolve it: %s", what, reason)
            failed[entry.member] = (entry, reason)
            continue
        log.info("%s: committed and fenced by the coordinator", what)
        resolved.append(entry)
    return JobOutcome(job, tuple(resolved), failed, cancelled=False)


class TxnWorker:
    """Steps 1-4 (see the module docstring)."""

    def __init__(self, report: Callable[[JobOutcome], None], resolve: EntryResolver) -> None:
        self._report = report
        self._resolve = resolve
        self._jobs: queue.SimpleQueue[ResolveJob] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._current: ResolveJob | None = None
        self._thread: threading.Thread | None = None

    def submit(self, job: ResolveJob) -> None:
        """Step 1 (loop thread)."""
        if self._stop.is_set():
            raise RuntimeError("the transaction worker is stopped")
        self._jobs.put(job)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="region-txn-resolve", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                job = self._jobs.get(timeout=IDLE_POLL_S)
            except queue.Empty:
                continue
            self._current = job
            if self._stop.is_set():
                job.cancel.set()
            try:
                outcome = run_job(job, self._resolve)
            finally:
                self._current = None
            try:
                self._report(outcome)
            except Exception:  # the loop is gone: the entries stay in the document for the next run
                log.exception("region %s: the transaction worker could not report its outcome", job.region)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Step 4; idempotent."""
        self._stop.set()
        current = self._current
        if current is not None:
            current.cancel.set()
        thread = self._thread
        if thread is None:
            return
        thread.join(timeout)
        if thread.is_alive():
            log.error("the transaction worker did not end within %.0fs (a Kafka step in flight)", timeout)


__all__ = ["EntryResolver", "JobCancelled", "TxnWorker", "entry_resolver", "resolve_entry", "run_job"]
