"""``python -m cr_consumer.cli.standby PIPELINE_MODULE``: a warm standby member
process, which the runner (``cr_consumer/runtime/runner/standby.py``) starts
ahead so that a member that died is replaced without a Python start-up.

1. Import what a member runs: ``crkafka member``, the Kafka source and its
   client library (``--kafka-client``), the control channel, and the pipeline
   module (as ``Region.start`` does: a module whose import has side effects
   has them here too). Log ``standby ready`` with the time it took, and say
   ``ready`` on the status pipe (``--status-fd``, ``runtime/runner/handoff.py``):
   the runner hands nothing to a standby before that.
2. Wait for the hand-over line on stdin (``runtime/runner/handoff.py``),
   waking every :data:`PARENT_CHECK_S`. Nothing else happens before it: no
   socket is opened, the coordinator and Kafka never hear of a standby. The
   wait ends without a member when stdin reaches its end (the runner stopped
   the standby or died), when the parent process changed (the runner died and
   the standby was re-parented), or after :data:`MAX_WAIT_S`; the standby then
   exits 0 (the runner starts another one when it still wants one).
3. Decode the line and open the member's log (appended). Either failing: answer
   ``refused`` with why on the status pipe and exit ExitCode.CONFIG (the runner
   logs why and starts the member cold). Else point stdout and stderr at the
   log, answer ``took``, close the status pipe, and run ``crkafka member`` with
   the argv handed over: from here on this process is that member, with its
   exit codes; the Kafka properties, when there are any, are read from the
   rest of stdin.

A status pipe that is gone (the runner died) ends the standby (exit 0).

SIGTERM before the hand-over ends the standby at once (the default action:
it holds nothing to save).
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import sys
import time

#: How often the waiting standby checks that its parent is still the runner
#: that started it: bounds how long a standby outlives a runner killed with
#: SIGKILL whose pipe end another process still held.
PARENT_CHECK_S = 1.0
#: Longest wait for a hand-over. A runner that never uses its standby (no
#: member dies) gets a fresh one this often; bounds a forgotten standby's life.
MAX_WAIT_S = 6 * 3600.0

#: What a member imports on its way to a running source (``Member.run``),
#: besides ``crkafka member`` itself: the imports it makes lazily.
MEMBER_MODULES = (
    "cr_consumer.cli.member",
    "cr_consumer.operator.consumer",
    "cr_consumer.operator.config",
    "cr_consumer.runtime.member.control",
    "coordinator.client",
)
CLIENT_MODULES = {
    "kafka-python": "cr_consumer.kafka.kafka_python.client",
    "librdkafka": "cr_consumer.kafka.librdkafka.client",
}


def _log(message: str, level: str = "INFO") -> None:
    """One line in the text log format (the standby's log, before the member sets up logging)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"{stamp} {level} cr_consumer.cli.standby [pid {os.getpid()}] {message}", file=sys.stderr, flush=True)


def preload(pipeline: str, kafka_client: str | None) -> None:
    """Step 1. A pipeline module that cannot be loaded is left to the member
    (which reports it as a bad setting, in the member's log)."""
    for name in MEMBER_MODULES:
        importlib.import_module(name)
    importlib.import_module(CLIENT_MODULES.get(kafka_client or "kafka-python", CLIENT_MODULES["kafka-python"]))
    from cr_consumer.runtime.member.setup import SettingsError, load_pipeline_module

    try:
        load_pipeline_module(pipeline)
    except (SettingsError, ImportError) as exc:
        _log(f"the pipeline module {pipeline!r} does not load ({exc}); the member will say why")


class Status:
    """The standby's end of its status pipe (None: no pipe, when run by hand)."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd
        if fd is not None:
            os.set_inheritable(fd, False)  # the member's own child processes must not hold it

    def say(self, line: bytes) -> bool:
        """Write one status line; False when the runner's end is gone."""
        if self._fd is None:
            return True
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view) :]
        except BrokenPipeError:
            return False
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def wait_for_input(stdin: int, parent: int, max_wait_s: float) -> bool:
    """Step 2: True once stdin is readable (a line, or its end: the caller reads
    which); False when the wait ends without it (parent changed, ``max_wait_s`` passed)."""
    deadline = time.monotonic() + max_wait_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            _log(f"no hand-over within {max_wait_s:.0f}s; exiting (the runner starts a fresh standby)")
            return False
        readable, _, _ = select.select([stdin], [], [], min(PARENT_CHECK_S, remaining))
        if readable:
            return True
        if os.getppid() != parent:
            _log("the runner that started this standby is gone; exiting")
            return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="crkafka standby", description=__doc__.split("\n\n")[0])
    parser.add_argument("pipeline", metavar="PIPELINE_MODULE")
    parser.add_argument("--kafka-client", choices=sorted(CLIENT_MODULES), default=None)
    parser.add_argument("--max-wait", type=float, default=MAX_WAIT_S, help=argparse.SUPPRESS)
    parser.add_argument("--status-fd", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    parent = os.getppid()
    status = Status(args.status_fd)
    t0 = time.monotonic()
    preload(args.pipeline, args.kafka_client)
    _log(f"standby ready in {time.monotonic() - t0:.2f}s (imports and the pipeline module)")

    from cr_consumer.exit_code import ExitCode
    from cr_consumer.runtime.runner import handoff

    if not status.say(handoff.StatusLine(handoff.Status.READY).encode()):
        _log("the runner's status pipe is closed: the runner is gone; exiting")
        return ExitCode.OK
    if not wait_for_input(sys.stdin.fileno(), parent, args.max_wait):
        return ExitCode.OK
    line = sys.stdin.buffer.readline(handoff.MAX_HANDOFF_BYTES + 1)
    if not line:
        _log("stdin closed: the runner stopped this standby")
        return ExitCode.OK
    try:
        given = handoff.decode(line)
        fd = os.open(given.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except (handoff.HandoffError, OSError) as exc:
        _log(f"bad hand-over: {exc}", "ERROR")
        status.say(handoff.StatusLine(handoff.Status.REFUSED, str(exc)).encode())
        return ExitCode.CONFIG
    _log(f"handed over: this process is now member {given.member} (log {given.log})")
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    took = status.say(handoff.StatusLine(handoff.Status.TOOK, given.member).encode())
    status.close()
    if not took:  # the runner is gone (or gave up on this hand-over and kills this process)
        _log("the runner's status pipe closed before the hand-over was answered; exiting", "ERROR")
        return ExitCode.ERROR
    from cr_consumer.cli import member

    return member.main(list(given.argv))


if __name__ == "__main__":
    sys.exit(main())
