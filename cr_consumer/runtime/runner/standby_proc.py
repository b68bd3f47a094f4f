"""One standby process as the runner sees it: the process, the read end of its
status pipe, and where it is in the hand-over (``handoff.py`` has the lines).

:data:`TRANSITIONS` is the state machine's table (the project's one
state-machine helper, ``coordinator/protocol/common/transitions.py``: every transition
logged, one not in the table raises ``IllegalTransition``):

====================  ===========================================================
STARTING              spawned, importing; nothing is handed to it
READY                 it said ``ready``: the next member start may take it
HANDING_OVER          the hand-over is being written and its answer awaited
MEMBER                it answered ``took``: a member process now, not a standby
ENDED                 it died, refused, did not answer in time, or was stopped
====================  ===========================================================

:class:`StandbyProc` does the I/O, on the supervisor's thread (or a fault
handle's) under the supervisor's lock:

1. :meth:`~StandbyProc.poll` reads what the status pipe holds without
   blocking: ``ready`` moves STARTING to READY.
2. :meth:`~StandbyProc.hand_over` writes the hand-over document, then waits for
   the answer, both before one deadline (``launch.HANDOFF_TIMEOUT_S``); ``took``
   moves it to MEMBER. Anything else (``standby.py`` lists the cases) raises
   :class:`HandoffFailed` with the reason and moves it to ENDED; the caller then
   ends it (:meth:`~StandbyProc.end`) and starts the member cold.
3. :meth:`~StandbyProc.end` signals, reaps (SIGKILL after a bound) and closes
   its pipes.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import select
import subprocess
import time

from coordinator.protocol.common.transitions import StateMachine, TransitionTable
from cr_consumer.runtime.runner.handoff import MAX_STATUS_BYTES, HandoffError, Status, StatusLine, decode_status

log = logging.getLogger(__name__)

#: Bound on reaping a standby after its signal (then after SIGKILL): one stuck
#: in the kernel cannot hang the supervisor; it is logged and left.
END_TIMEOUT_S = 5.0


class HandoffFailed(RuntimeError):
    """The standby did not take the hand-over (the message says why); it is ENDED."""


class StandbyState(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    HANDING_OVER = "handing-over"
    MEMBER = "member"
    ENDED = "ended"


S = StandbyState
TRANSITIONS: TransitionTable[StandbyState] = TransitionTable(
    StandbyState,
    {
        S.STARTING: {S.READY, S.ENDED},
        S.READY: {S.HANDING_OVER, S.ENDED},
        S.HANDING_OVER: {S.MEMBER, S.ENDED},
        S.MEMBER: set(),
        S.ENDED: set(),
    },
)


def standby_machine(pid: int) -> StateMachine[StandbyState]:
    """The machine of the standby ``pid``, in STARTING."""
    return StateMachine(f"standby {pid}", TRANSITIONS, S.STARTING, log)


class StandbyProc:
    """See the module docstring. ``status_fd`` is the read end of the standby's
    status pipe (this object closes it); ``started`` its spawn time (monotonic)."""

    def __init__(self, proc: subprocess.Popen[bytes], status_fd: int, started: float) -> None:
        self.proc = proc
        self.started = started
        self.machine = standby_machine(proc.pid)
        self._fd: int | None = status_fd
        os.set_blocking(status_fd, False)
        self._buf = b""

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def state(self) -> StandbyState:
        return self.machine.state

    def poll(self) -> None:
        """Step 1: take in the status lines available now (READY on ``ready``)."""
        for line in self._read_available():
            if line.status is Status.READY and self.state is S.STARTING:
                self.machine.to(S.READY, "it said ready")
            else:
                log.warning(
                    "standby %d: unexpected status %s in state %s", self.pid, line.status.value, self.state.value
                )

    def stopped(self) -> bool:
        """True when the process is stopped (SIGSTOP, a debugger), as ``/proc`` says
        now; False where ``/proc`` cannot tell (not Linux, or it just ended)."""
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            return False
        # "pid (comm) S ...": the command may hold spaces and parentheses, the state follows the last ")"
        return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] in (b"T", b"t")

    def hand_over(self, document: bytes, timeout_s: float) -> str:
        """Step 2: returns the member name the standby answered with; HandoffFailed otherwise."""
        self.machine.to(S.HANDING_OVER, "a member start takes it")
        deadline = time.monotonic() + timeout_s
        try:
            answer = self._converse(document, deadline)
        except HandoffFailed as exc:
            self.machine.to(S.ENDED, str(exc))
            raise
        self.machine.to(S.MEMBER, f"it took member {answer}")
        self._close_fd()
        return answer

    def _converse(self, document: bytes, deadline: float) -> str:
        stdin = self.proc.stdin
        if stdin is None:
            raise HandoffFailed("the standby has no stdin pipe")
        try:
            written = write_within(stdin.fileno(), document, deadline)
        except OSError as exc:  # EPIPE: it died since it was last seen running
            raise HandoffFailed(f"it did not take the hand-over ({exc})") from None
        if not written:
            raise HandoffFailed("it did not read the hand-over in time (stopped or wedged)")
        _close_stdin(self.proc)
        while True:
            for line in self._read_available():
                if line.status is Status.TOOK:
                    return line.detail
                if line.status is Status.REFUSED:
                    raise HandoffFailed(f"it refused the hand-over: {line.detail}")
                raise HandoffFailed(f"it answered {line.status.value!r} to the hand-over")
            if self._fd is None:
                raise HandoffFailed(f"it ended before it answered (exit code {self.proc.poll()})")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise HandoffFailed("it did not answer the hand-over in time (stopped or wedged)")
            select.select([self._fd], [], [], remaining)

    def _read_available(self) -> list[StatusLine]:
        """Complete status lines readable now; at the pipe's end the fd is closed.
        A malformed or oversized line raises HandoffFailed."""
        lines: list[StatusLine] = []
        while self._fd is not None:
            try:
                chunk = os.read(self._fd, MAX_STATUS_BYTES)
            except BlockingIOError:
                break
            if not chunk:
                self._close_fd()
                break
            self._buf += chunk
            while b"\n" in self._buf:
                raw, self._buf = self._buf.split(b"\n", 1)
                try:
                    lines.append(decode_status(raw + b"\n"))
                except HandoffError as exc:
                    raise HandoffFailed(f"bad status line ({exc})") from None
            if len(self._buf) > MAX_STATUS_BYTES:
                raise HandoffFailed(f"status line longer than {MAX_STATUS_BYTES} bytes")
        return lines

    def end(self, sig: int, why: str) -> None:
        """Step 3: ``sig`` (if it runs), reap (SIGKILL after END_TIMEOUT_S), close the pipes."""
        if self.state is not S.ENDED:
            self.machine.to(S.ENDED, why)
        proc = self.proc
        if proc.poll() is None:
            proc.send_signal(sig)
        try:
            proc.wait(END_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            try:
                proc.wait(END_TIMEOUT_S)
            except subprocess.TimeoutExpired:  # stuck in the kernel: logged and left
                log.error(
                    "the standby (pid %d) did not end %.0fs after SIGKILL; left unreaped", proc.pid, END_TIMEOUT_S
                )
        self.close()

    def close(self) -> None:
        """Close this side's pipes (the process is reaped, or is a member now)."""
        _close_stdin(self.proc)
        self._close_fd()

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def write_within(fd: int, data: bytes, deadline: float) -> bool:
    """Write all of ``data`` to the pipe ``fd`` (made non-blocking) before
    ``deadline`` (monotonic); False when the reader did not take it in time.
    OSError (BrokenPipeError) when the reader is gone."""
    os.set_blocking(fd, False)
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
            continue
        except BlockingIOError:
            pass
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        select.select([], [fd], [], remaining)
    return True


def _close_stdin(proc: subprocess.Popen[bytes]) -> None:
    if proc.stdin is not None and not proc.stdin.closed:
        # the pipe's reader is gone; nothing was buffered (written on the descriptor)
        with contextlib.suppress(OSError):
            proc.stdin.close()


__all__ = [
    "END_TIMEOUT_S",
    "TRANSITIONS",
    "HandoffFailed",
    "StandbyProc",
    "StandbyState",
    "standby_machine",
    "write_within",
]
