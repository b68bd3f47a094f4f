"""The coordinator under fuzz: a real ``cr-coordinator`` process and a raw DEALER socket.

Life cycle:

1. ``start()`` launches the process (``coordinator.launcher``) on a state dir
   and connects a raw DEALER socket (any bytes, any number of frames).
2. ``send(frame)`` sends without waiting; ``barrier(timeout)`` sends a ping
   with a fresh id and collects every message until its reply arrives:
   replies to earlier frames (in order, the loop thread answers in order),
   deferred replies (merges) and pushes (region commands).
3. ``alive()`` / ``rss_kb()`` / ``peak_rss_kb()`` read the process and
   ``/proc/<pid>/status`` (VmRSS, VmHWM).
4. ``restart()`` starts it again on the same state dir and endpoint after a
   crash (or a hang, after SIGKILL); the socket is recreated, so frames queued
   for the dead process are dropped, not delivered to the new one.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import zmq

from coordinator.launcher import CoordinatorProcess
from tests.fuzz.frames import Frame

#: How long a barrier waits for the ping reply: far above a healthy loop's
#: latency (a few ms, ~1 s after a 4 MiB frame) so that a slow machine is not a "hang".
BARRIER_TIMEOUT_S = 20.0
#: Messages kept per socket before ZeroMQ drops (the fuzzer reads after each batch).
HWM = 100_000


@attrs.define
class Reply:
    """One message received from the coordinator, decoded as JSON when possible."""

    id: Any
    type: str | None
    body: Any
    raw: bytes


class Target:
    def __init__(self, state_dir: Path, log_path: Path | None = None, extra_args: Sequence[str] = ()) -> None:
        self.state_dir = Path(state_dir)
        self.proc = CoordinatorProcess(self.state_dir, log_path=log_path, extra_args=extra_args)
        self._ctx = zmq.Context.instance()
        self._sock: zmq.Socket | None = None
        self._ids = itertools.count()
        self.starts = 0

    # ------------------------------------------------------------------ process
    def start(self) -> Target:
        self.proc.start()
        self.starts += 1
        self._connect()
        return self

    def restart(self) -> None:
        """After a crash or a hang: SIGKILL whatever is left, start on the same state dir."""
        self.proc.kill()
        self._close_socket()
        self.start()

    def stop(self) -> None:
        self._close_socket()
        self.proc.terminate()

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.running

    def _status_kb(self, key: str) -> int | None:
        pid = self.proc.pid
        if pid is None or not self.proc.running:
            return None
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        except OSError:
            return None
        return None

    def rss_kb(self) -> int | None:
        return self._status_kb("VmRSS")

    def peak_rss_kb(self) -> int | None:
        return self._status_kb("VmHWM")

    def log_tail(self, n: int = 60) -> str:
        return self.proc.log_tail(n)

    # ------------------------------------------------------------------ socket
    def _connect(self) -> None:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, HWM)
        sock.setsockopt(zmq.RCVHWM, HWM)
        assert self.proc.endpoint is not None
        sock.connect(self.proc.endpoint)
        self._sock = sock

    def _close_socket(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None

    def send(self, frame: Frame) -> None:
        assert self._sock is not None
        self._sock.send_multipart(list(frame.parts), copy=True)

    def send_body(self, msg_type: str, body: dict[str, Any], rid: str) -> None:
        assert self._sock is not None
        self._sock.send(json.dumps({"v": 1, "id": rid, "type": msg_type, "body": body}).encode())

    def barrier(self, timeout: float = BARRIER_TIMEOUT_S) -> list[Reply] | None:
        """Ping and collect everything received up to its reply; None when no reply came in time."""
        assert self._sock is not None
        rid = f"barrier-{next(self._ids)}"
        self._sock.send(json.dumps({"v": 1, "id": rid, "type": "ping", "body": {}}).encode())
        received: list[Reply] = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._sock.poll(int(min(left, 0.2) * 1000)):
                if left <= 0 or not self.alive():
                    return None
                continue
            raw = self._sock.recv()
            reply = decode_reply(raw)
            if reply.id == rid:
                return received
            received.append(reply)


def decode_reply(raw: bytes) -> Reply:
    try:
        obj = json.loads(raw)
    except ValueError:
        return Reply(None, None, None, raw)
    if not isinstance(obj, dict):
        return Reply(None, None, obj, raw)
    return Reply(obj.get("id"), obj.get("type"), obj.get("body"), raw)
