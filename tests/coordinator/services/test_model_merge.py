"""Model-based (stateful) test of the checkpoint merge (``MergeService``), through its service API.

The merge and registry services are attached to :class:`ServiceHarness`, which
implements the part of the server's extension API they use (``add_handler``,
``reply*``, ``schedule`` on a virtual clock, ``store``: a real ``StateStore``
on a temp dir, ``limits``) and dispatches a request the way the server does:
``from_body`` validation, then the handler; a ``CoordinatorError`` becomes
the error reply. No sockets: this tests the merge protocol, not the transport.

Hypothesis registers and unregisters operators, sends contributions (any
operator, seq, attempt, N, offsets, timeout), retires checkpoints, and lets
time pass, in any order. A reference model of docs/protocol.md
(``merge_checkpoint`` steps 1-6, ``retire_checkpoint``) predicts every reply:

* a merge completes only when N distinct names contributed, and then every
  waiting contributor gets the same map: the per-partition MINIMUM over the
  latest contribution of each contributor;
* a contributor still waiting ``timeout_ms`` after its request gets TIMEOUT;
  a retired merge's waiters get RETIRED, later contributions too;
* a contribution to a completed merge gets its map again (a contributor) or
  MERGE_CLOSED (anyone else); another N gets INVALID;
* every request gets at most one reply, and none is left unanswered once its
  timeout has passed (except one replaced by a newer request of the same name).
"""

from __future__ import annotations

import heapq
import itertools
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from coordinator.protocol.wire import fields
from coordinator.protocol.wire.errors import CoordinatorError
from coordinator.server.api import DEFERRED, ReplyMessage, Request, Timer
from coordinator.server.limits import LimitCounter, Limits
from coordinator.services.merge import MergeService
from coordinator.services.registry import RegistryService
from coordinator.store.state_store import StateStore

GROUP = "g"
OPERATORS = ["a", "b", "c"]
TIMEOUTS_MS = [100, 1000, 5000]


class ServiceHarness:
    """The server's extension API for services, on a virtual clock, replies collected in order."""

    def __init__(self, state_dir: Path) -> None:
        self.store = StateStore(state_dir)
        self.store.load()
        self.limits = Limits()
        self.limit_counter = LimitCounter(None)
        self.metrics = None
        self.now = 0.0
        self.replies: list[tuple[Request, str, Any]] = []  # (request, "ok" | error code, body or message)
        self._handlers: dict[str, tuple[type, Any]] = {}
        self._timers: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()

    # the extension API (coordinator/server/api.py)
    def add_handler(self, msg_type: str, message_cls: type, handler: Any) -> None:
        self._handlers[msg_type] = (message_cls, handler)

    def add_service(self, service: Any) -> None:
        service.attach(self)

    def mark_dirty(self) -> None:
        """Durability is not under test here (no fsync per request); close() syncs."""

    def reply(self, req: Request, reply: ReplyMessage) -> None:
        self.replies.append((req, "ok", reply.to_body()))

    def reply_many(self, reqs: list[Request], reply: ReplyMessage) -> None:
        for req in reqs:
            self.reply(req, reply)

    def reply_error(self, req: Request, err: CoordinatorError) -> None:
        self.replies.append((req, err.code.value, err.message))

    def schedule(self, delay_s: float, callback: Any) -> Timer:
        timer = Timer(self.now + max(0.0, delay_s), callback)
        heapq.heappush(self._timers, (timer.deadline, next(self._seq), timer))
        return timer

    # driving
    def request(self, msg_type: str, body: dict[str, Any]) -> Request:
        req = Request(identity=b"client", id=f"r{next(self._seq)}", type=msg_type, received=self.now)
        cls, handler = self._handlers[msg_type]
        try:
            result = handler(req, cls.from_body(body))
        except CoordinatorError as err:
            self.reply_error(req, err)
            return req
        if result is not DEFERRED:
            self.reply(req, result)
        return req

    def advance(self, dt: float) -> None:
        self.now += dt
        while self._timers and self._timers[0][0] <= self.now:
            _, _, timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                timer.callback()


def merged(contributions: dict[str, dict[tuple[str, int], int]]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for offsets in contributions.values():
        for tp, off in offsets.items():
            out[tp] = min(off, out.get(tp, off))
    return out


offset_maps = st.dictionaries(st.tuples(st.sampled_from(["t", "u"]), st.integers(0, 3)), st.integers(0, 50), max_size=4)


class MergeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="merge-model-")
        self.server = ServiceHarness(Path(self.tmp) / "state")
        self.registry = RegistryService()
        self.server.add_service(self.registry)
        self.server.add_service(MergeService(self.registry))
        # reference model
        self.registered: set[str] = set()
        self.retired = -1
        self.pending: dict[
            tuple[int, int], dict[str, Any]
        ] = {}  # key -> {n, contributions, waiters{op: (rid, deadline)}}
        self.completed: dict[tuple[int, int], tuple[dict, list[str]]] = {}
        self.expect: dict[str, tuple[str, Any]] = {}  # rid -> expected (code, map or None)
        self.superseded: set[str] = set()
        self.seen = 0

    def teardown(self) -> None:
        self.server.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------------ rules
    @rule(op=st.sampled_from(OPERATORS))
    def register(self, op: str) -> None:
        self.server.request("register", {"group": GROUP, "region_index": 0, "operator": op})
        self.registered.add(op)

    @rule(op=st.sampled_from(OPERATORS))
    def unregister(self, op: str) -> None:
        if self.registered:
            self.server.request("unregister", {"group": GROUP, "operator": op})
            self.registered.discard(op)

    @rule(
        op=st.sampled_from(OPERATORS),
        seq=st.integers(0, 3),
        attempt=st.integers(0, 1),
        n=st.integers(1, 3),
        offsets=offset_maps,
        timeout_ms=st.sampled_from(TIMEOUTS_MS),
    )
    def contribute(self, op: str, seq: int, attempt: int, n: int, offsets: dict, timeout_ms: int) -> None:
        req = self.server.request(
            "merge_checkpoint",
            {
                "group": GROUP,
                "seq": seq,
                "attempt": attempt,
                "n_contributors": n,
                "operator": op,
                "offsets": fields.encode_offsets(offsets),
                "timeout_ms": timeout_ms,
            },
        )
        rid = req.id
        key = (seq, attempt)
        if op not in self.registered:
            self.expect[rid] = ("NOT_REGISTERED", None)
        elif seq <= self.retired:
            self.expect[rid] = ("RETIRED", None)
        elif key in self.completed:
            done_map, names = self.completed[key]
            self.expect[rid] = ("ok", done_map) if op in names else ("MERGE_CLOSED", None)
        elif key in self.pending and self.pending[key]["n"] != n:
            self.expect[rid] = ("INVALID", None)
        else:
            p = self.pending.setdefault(key, {"n": n, "contributions": {}, "waiters": {}})
            p["contributions"][op] = dict(offsets)
            old = p["waiters"].pop(op, None)
            if old is not None:
                self.superseded.add(old[0])
                self.expect.pop(old[0], None)
            if len(p["contributions"]) >= p["n"]:
                result = merged(p["contributions"])
                for waiter_rid, _ in p["waiters"].values():
                    self.expect[waiter_rid] = ("ok", result)
                self.expect[rid] = ("ok", result)
                self.completed[key] = (result, sorted(p["contributions"]))
                del self.pending[key]
            else:
                p["waiters"][op] = (rid, self.server.now + timeout_ms / 1000.0)
        self._check()

    @rule(
        seq=st.integers(0, 3),
        attempt=st.integers(0, 1),
        maps=st.lists(offset_maps, min_size=3, max_size=3),
        timeout_ms=st.sampled_from(TIMEOUTS_MS),
    )
    def every_member_contributes(self, seq: int, attempt: int, maps: list, timeout_ms: int) -> None:
        """A reset round: every registered operator contributes with N = the registered count."""
        names = sorted(self.registered)
        for op, offsets in zip(names, maps):
            self.contribute(op, seq, attempt, len(names), offsets, timeout_ms)

    @rule(seq=st.integers(0, 3))
    def retire(self, seq: int) -> None:
        self.server.request("retire_checkpoint", {"group": GROUP, "seq": seq})
        if not self.registered and not self._group_exists():
            return
        self.retired = max(self.retired, seq)
        for key in [k for k in self.pending if k[0] <= seq]:
            for rid, _ in self.pending.pop(key)["waiters"].values():
                self.expect[rid] = ("RETIRED", None)
        for key in [k for k in self.completed if k[0] <= seq]:
            del self.completed[key]
        self._check()

    @rule(dt=st.sampled_from([0.05, 0.5, 2.0, 6.0]))
    def time_passes(self, dt: float) -> None:
        self.server.advance(dt)
        for key in list(self.pending):
            p = self.pending[key]
            for op, (rid, deadline) in list(p["waiters"].items()):
                if deadline <= self.server.now:
                    del p["waiters"][op]
                    self.expect[rid] = ("TIMEOUT", None)
            if not p["waiters"]:
                del self.pending[key]
        self._check()

    def _group_exists(self) -> bool:
        return self.server.store.region_index(GROUP) is not None

    # ------------------------------------------------------------------ checks
    def _check(self) -> None:
        """Every reply since the last check is the one the model predicts, and arrives once."""
        new, self.seen = self.server.replies[self.seen :], len(self.server.replies)
        for req, code, body in new:
            if req.type != "merge_checkpoint":
                continue
            assert req.id not in self.superseded, f"{req.id} was replaced by a newer request but got {code}"
            assert req.id in self.expect, f"unexpected reply {code} {body} to {req.id}"
            want_code, want_map = self.expect.pop(req.id)
            assert code == want_code, f"{req.id}: got {code} ({body}), expected {want_code}"
            if code == "ok":
                got = {(t, p): o for t, p, o in body["offsets"]}
                assert got == want_map, f"{req.id}: merged map {got}, expected the per-partition minimum {want_map}"

    @invariant()
    def nothing_unanswered_past_its_deadline(self) -> None:
        now = self.server.now
        for p in self.pending.values():
            for rid, deadline in p["waiters"].values():
                assert deadline > now or rid in self.expect, rid
        # predicted replies that did not come: everything predicted is delivered at once
        waiting = {rid for p in self.pending.values() for rid, _ in p["waiters"].values()}
        missing = set(self.expect) - waiting
        assert not missing, f"requests without their predicted reply: {sorted(missing)}"


# Deterministic in ``make test``; MODEL_EXAMPLES=2000 MODEL_RANDOM=1 for a longer, random search.
MergeMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("MODEL_EXAMPLES", "40")),
    stateful_step_count=40,
    derandomize=not os.environ.get("MODEL_RANDOM"),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)
test_merge_model = MergeMachine.TestCase
