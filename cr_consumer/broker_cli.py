"""``crkafka broker``: start the embedded tansu broker and print its bootstrap address."""

from __future__ import annotations

import argparse
import signal
import threading

from cr_consumer.broker import EmbeddedBroker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=None, help="TCP port (default: a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")


def run(args: argparse.Namespace) -> int:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with EmbeddedBroker(port=args.port, host=args.host) as broker:
        print(broker.bootstrap, flush=True)
        while not stop.wait(0.5):
            if broker._proc is None or broker._proc.poll() is not None:
                print("broker exited", flush=True)
                return 1
    return 0
