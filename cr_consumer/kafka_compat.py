"""Work-around for a kafka-python 3.0.12 defect in pause()/resume().

The defect (see /work/shared/notes/kafka-environment.md): when a partition is
paused while the fetcher holds parsed records for it, the fetcher parks them
(``_paused_partition_records``) and excludes that partition from every fetch
request until they are restored. ``Fetcher.fetched_records`` restores parked
records only when its in-line slot ``_next_partition_records`` is ``None``,
but a fully consumed slot keeps a drained (empty, falsy) object instead of
``None``. So once something was consumed after the pause, a resumed partition
is never fetched again: it silently stops. The same happens to a partition
that was parked when it was revoked and is assigned again later.

The fix: before each poll, if the in-line slot holds a drained object, set it
to ``None`` (what the fetcher itself does after it parks records). That is
exactly the state the restore code expects; the next ``fetched_records`` call
then restores one parked partition per poll, and records whose offset no longer
matches the position are discarded by the fetcher's own position check.

This touches a private attribute, so it is guarded: it does nothing unless the
attributes look exactly as in the affected versions, and the behaviour is
covered by ``tests/test_operator_backpressure.py`` (fill the queue, pause,
resume, and get every record), which fails if a future version changes it.
"""

from __future__ import annotations


def unstick_parked_fetches(consumer) -> bool:
    """Apply the work-around; True if there were parked records to release."""
    fetcher = getattr(consumer, "_fetcher", None)
    parked = getattr(fetcher, "_paused_partition_records", None)
    if not parked:
        return False
    slot = getattr(fetcher, "_next_partition_records", None)
    if slot is not None and not slot:  # drained: holds no records
        fetcher._next_partition_records = None
    return True


__all__ = ["unstick_parked_fetches"]
