"""``crkafka broker``: start the embedded tansu broker and print its bootstrap address."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from coordinator.protocol.common.cli_types import port
from cr_consumer.cli import refuse
from cr_consumer.exit_code import ExitCode
from cr_consumer.testing.broker import BrokerStartError, EmbeddedBroker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=port, default=None, help="TCP port (default: a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")


def run(args: argparse.Namespace) -> ExitCode:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        broker = EmbeddedBroker(port=args.port, host=args.host).start()
    except BrokerStartError as exc:  # the broker extra missing, or the port taken
        return refuse("broker", str(exc))
    try:
        print(broker.bootstrap, flush=True)
        while not stop.wait(0.5):
            if not broker.running:
                print("broker exited", file=sys.stderr, flush=True)
                return ExitCode.ERROR
    finally:
        broker.stop()
    return ExitCode.OK
