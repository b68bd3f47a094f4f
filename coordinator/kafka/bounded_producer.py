"""Bounds that kafka-python's producer lacks, for a transactional producer of either process.

kafka-python's ``commit_transaction()`` and ``abort_transaction()`` wait without a timeout, and
a fenced producer on the test broker gets no answer at all (the broker drops the connection;
kafka-python reconnects for ever). So:

1. `end_transaction` starts the commit or abort on the producer's transaction manager, wakes
   the sender, and waits for the result at most ``timeout_s``. A refusal (fenced, or an earlier
   send failed the transaction) or no answer in time raises `TransactionEndError`; the
   transaction's outcome is then unknown to the caller.
2. `force_close` stops the sender at once (its unsent records fail: a fenced producer's requests
   would be retried for ever), waits for its thread at most ``timeout_s``, then closes the
   producer without flushing. It returns whether the sender thread stopped in time.

kafka-python keeps the transaction manager and the sender in private fields
(``_transaction_manager``, ``_sender``); this module is the one place that touches them.
"""

from __future__ import annotations

from kafka import KafkaProducer

from coordinator.kafka.raw_requests import TransactionEndError


def end_transaction(producer: KafkaProducer, timeout_s: float, what: str, *, commit: bool) -> None:
    """Step 1: commit (or abort) ``producer``'s open transaction within ``timeout_s``."""
    manager = producer._transaction_manager
    if manager is None:
        raise ValueError("the producer has no transactional.id")
    verb = "committing" if commit else "aborting"
    try:
        result = manager.begin_commit() if commit else manager.begin_abort()
        producer._sender.wakeup()
        done = result.wait(timeout_ms=max(0.0, timeout_s) * 1000)
    except Exception as exc:  # refused: fenced, or an earlier send failed the transaction
        raise TransactionEndError(f"{verb} {what} failed: {type(exc).__name__}: {exc}") from exc
    if not done:
        raise TransactionEndError(f"{verb} {what}: no answer within {timeout_s:g}s")


def force_close(producer: KafkaProducer, timeout_s: float) -> bool:
    """Step 2: True when the sender thread stopped within ``timeout_s``."""
    sender = producer._sender
    sender.force_close()
    sender.join(timeout_s)
    stopped = not sender.is_alive()
    producer.close(timeout=0)  # nothing left to flush: the forced close failed every unsent batch
    return stopped
