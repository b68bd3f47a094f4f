"""Process hooks of the Spark source runner: members leave the group when it ends.

Spark runs the reader's ``latestOffset``/``commit`` in a long-lived "source
runner" Python process, a child of the JVM. Its ``stop()`` is unreliable (the
JVM may terminate the runner first; a simple reader never gets one), and on
``query.stop()`` it terminates the runner. Three hooks make the members leave
the group cleanly instead of being evicted a session timeout later:

1. SIGTERM (query stop) and SIGHUP: the handler closes the group (every
   member closes its consumer, which sends LeaveGroup) and raises
   ``SystemExit``. Spark calls the reader's ``stop()`` (which closes through
   the same :func:`close_group`) and sends SIGTERM twice in a row; a signal
   during a close is deferred until the close ends, so that it cannot abort
   the close half way (members left in the group and the coordinator).
   SIGHUP is what pyspark's worker daemon sends its whole process group when
   the JVM goes away (its stdin closes), and the runner is in that group.
   At SIGHUP's default action the runner dies with no clean-up, leaving its
   members registered in the coordinator: the likely cause (inferred from
   pyspark's daemon.py; the runner's log dies with the driver) of members
   still registered 60 s after a kill -9 of the driver under load.
2. Interpreter exit: when the JVM goes away, the runner's main loop fails on
   its socket and the process exits (``sys.exit``) without any Spark
   callback; an ``atexit`` hook closes the group on that path.
3. Parent watchdog: if the JVM dies (kill -9 of the driver), the runner is
   re-parented; a daemon thread notices the parent pid change within
   :data:`WATCHDOG_PERIOD_S`, closes the group and exits the process, so an
   orphaned runner never keeps consuming. (A kill -9 of the runner itself
   leaves no chance to clean up: the group evicts its members after
   ``session.timeout.ms``.)

They are installed once per process, from the runner's main thread (signal
handlers can only be installed there); :func:`uninstall` stops the watchdog.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType

import attrs

log = logging.getLogger(__name__)

#: How often the watchdog checks that the JVM is still the parent; bounds how
#: long an orphaned runner keeps its members in the group.
WATCHDOG_PERIOD_S = 1.0

#: How long the watchdog waits for a close already running on the main thread
#: before it exits the orphaned process anyway (a member's close joins its
#: thread within seconds; this only stops a stuck close from keeping the orphan).
ORPHAN_CLOSE_WAIT_S = 30.0


@attrs.define
class _HookState:
    """The process's hooks; one instance, :data:`_state`."""

    #: The installed close callback; None once taken (or before install).
    close: Callable[[], None] | None = None
    #: The SIGTERM/SIGHUP handlers are installed.
    signals: bool = False
    #: The atexit hook is registered.
    atexit: bool = False
    #: Stops the running watchdog; None when none runs.
    stop: threading.Event | None = None
    #: A close is running (step 1 of :func:`close_group`).
    closing: bool = False
    #: A signal came during the close: exit when it ends (step 3).
    exit_after_close: bool = False


_state = _HookState()
_closed = threading.Event()


def install(close: Callable[[], None]) -> None:
    """Run ``close()`` on SIGTERM or SIGHUP, at interpreter exit, and when the parent process dies."""
    _state.close = close
    _closed.clear()
    if not _state.signals:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, _closing_handler(signal.getsignal(signum)))
            _state.signals = True
        else:
            log.warning("crkafka: not on the main thread: no SIGTERM/SIGHUP handler (members are evicted on stop)")
    if not _state.atexit:
        atexit.register(close_group, "the source runner is exiting")
        _state.atexit = True
    if _state.stop is None:
        stop = threading.Event()
        parent = os.getppid()

        def watchdog() -> None:
            while not stop.wait(WATCHDOG_PERIOD_S):
                if os.getppid() != parent:
                    log.warning("crkafka: the Spark JVM (pid %d) is gone: closing the members and exiting", parent)
                    close_group("the Spark JVM is gone")
                    # a close already running on the main thread finishes first
                    _closed.wait(ORPHAN_CLOSE_WAIT_S)
                    os._exit(0)

        threading.Thread(target=watchdog, name="crkafka-watchdog", daemon=True).start()
        _state.stop = stop


def close_group(why: str) -> None:
    """Run the installed close callback once, whichever path comes first.

    1. The first caller marks the close as running, then takes the callback (a
       signal between the two sees the close running and is deferred).
    2. A later caller, or a signal handler, while it runs returns at once: a
       SIGTERM or SIGHUP cannot abort the close half way (Spark calls ``stop()``
       and then sends SIGTERM, often while the close from ``stop()`` runs).
    3. When it ends, a signal deferred during it exits the process
       (``SystemExit`` on the main thread), as the signal would have.
    """
    if _state.closing:
        return
    _state.closing = True
    close, _state.close = _state.close, None
    try:
        if close is not None:
            log.info("crkafka: %s: closing the members (they leave the group)", why)
            close()
    except Exception:  # the process is ending: logged with its traceback, exit goes on
        log.exception("crkafka: closing the members failed")
    finally:
        _state.closing = False
        _closed.set()
    if _state.exit_after_close and threading.current_thread() is threading.main_thread():
        raise SystemExit(0)


def _closing_handler(
    previous: signal.Handlers | Callable[[int, FrameType | None], object] | int | None,
) -> Callable[[int, FrameType | None], None]:
    def on_signal(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if _state.closing:
            # Spark sends SIGTERM twice on stop (stopWorker, then the factory's
            # stop), often while stop()'s close runs, and the daemon's SIGHUP
            # may follow: exiting here would abort the close half way
            log.info("crkafka: %s during the close: the process exits when it ends", name)
            _state.exit_after_close = True
            return
        close_group(name)
        if callable(previous):
            previous(signum, frame)
        raise SystemExit(0)

    return on_signal


def uninstall() -> None:
    """Stop the watchdog and forget the close callback (the SIGTERM handler stays, inert)."""
    stop, _state.stop = _state.stop, None
    if stop is not None:
        stop.set()
    _state.close = None
