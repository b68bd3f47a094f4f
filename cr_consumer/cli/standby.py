"""``python -m cr_consumer.cli.standby PIPELINE_MODULE``: a warm standby member
process, which the runner (``cr_consumer/runtime/runner/standby.py``) starts
ahead so that a member that died is replaced without a Python start-up.

1. Import what a member runs: ``crkafka member``, the Kafka source and its
   client library (``--kafka-client``), the control channel, and the pipeline
   module (as ``Region.start`` does: a module whose import has side effects
   has them here too). Log ``standby ready`` with the time it took.
2. Wait for the hand-over line on stdin (``runtime/runner/handoff.py``),
   waking every :data:`PARENT_CHECK_S`. Nothing else happens before it: no
   socket is opened, the coordinator and Kafka never hear of a standby. The
   wait ends without a member when stdin reaches its end (the runner stopped
   the standby or died), when the parent process changed (the runner died and
   the standby was re-parented), or after :data:`MAX_WAIT_S`; the standby then
   exits 0 (the runner starts another one when it still wants one).
3. Decode the line (a bad one: exit ExitCode.CONFIG), point stdout and stderr
   at the member's log (appended), and run ``crkafka member`` with the argv
   handed over: from here on this process is that member, with its exit codes;
   the Kafka properties, when there are any, are read from the rest of stdin.

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
MEMBER_MODULES = ("cr_consumer.cli.member", "cr_consumer.operator.consumer", "cr_consumer.operator.config",
                  "cr_consumer.runtime.member.control", "coordinator.client")
CLIENT_MODULES = {"kafka-python": "cr_consumer.kafka.kafka_python_client",
                  "librdkafka": "cr_consumer.kafka.librdkafka_client"}


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
    args = parser.parse_args(argv)
    parent = os.getppid()
    t0 = time.monotonic()
    preload(args.pipeline, args.kafka_client)
    _log(f"standby ready in {time.monotonic() - t0:.2f}s (imports and the pipeline module)")

    from cr_consumer.exit_code import ExitCode
    from cr_consumer.runtime.runner import handoff

    if not wait_for_input(sys.stdin.fileno(), parent, args.max_wait):
        return ExitCode.OK
    line = sys.stdin.buffer.readline(handoff.MAX_HANDOFF_BYTES + 1)
    if not line:
        _log("stdin closed: the runner stopped this standby")
        return ExitCode.OK
    try:
        given = handoff.decode(line)
    except handoff.HandoffError as exc:
        _log(f"bad hand-over: {exc}", "ERROR")
        return ExitCode.CONFIG
    fd = os.open(given.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    name = given.argv[given.argv.index("--name") + 1] if "--name" in given.argv[:-1] else "?"
    _log(f"handed over: this process is now member {name} (log {given.log})")
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    from cr_consumer.cli import member

    return member.main(list(given.argv))


if __name__ == "__main__":
    sys.exit(main())
