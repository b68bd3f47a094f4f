"""A fuzz campaign: batches of hostile frames against one coordinator process, checked after each batch.

Protocol of one batch (``Campaign._batch``, driven by hypothesis: every frame
is drawn from ``data.draw``, so a seed replays a campaign):

1. Draw ``batch`` frames (``frames.frame_builder``), plus (from a drawn seed:
   hypothesis requires draws that do not depend on the coordinator) the answers of a
   well-behaved member to the region commands pushed during the previous
   batch (acks of drain / checkpoint / reset, heartbeats), so that regions
   move through their cycle and the hostile frames hit every phase.
2. Send them all on the raw socket, then a ping barrier: every reply up to
   the ping's is read and matched to its frame by request id; the model
   (``model.AckModel``) records acknowledged writes and checks each reply.
3. The process must be alive and have answered the ping within
   ``target.BARRIER_TIMEOUT_S``; its RSS is sampled.
4. A crash (the process exited) or a hang (alive, no answer; then SIGKILL):
   the log's last traceback names it, the batch (and the one before, for
   crashes a tick raises later) is kept, the process is started again on
   the same state dir, and the model reads every acknowledged write back.
5. Every ``verify_every`` batches the model reads everything back too.

After the run, ``minimize`` replays each distinct crash on a fresh state dir,
frame by frame, and shrinks it to a short reproducer (bounded trials).
"""

from __future__ import annotations

import itertools
import json
import random
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import hypothesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from coordinator.client import CoordinatorClient
from coordinator.launcher import CoordinatorStartError
from coordinator.protocol.wire.errors import CoordinatorUnavailable
from tests.fuzz.frames import Frame, frame_builder
from tests.fuzz.model import AckModel
from tests.fuzz.schemas import discover_handlers
from tests.fuzz.target import Reply, Target

#: Frames drawn per batch: small enough that hypothesis' per-example buffer holds them.
BATCH = 25
#: Wait after a replayed reproducer before the last liveness check, for crashes
#: a region's tick raises once a member timeout passes.
SETTLE_S = 1.0
#: Bound on trials (a fresh coordinator each) when shrinking one crash.
MINIMIZE_TRIALS = 24
#: RSS growth over one batch reported as a memory finding: far above what a
#: batch of bounded requests may cost (a batch holds ~25 frames of <= 4 MiB).
RSS_JUMP_KB = 64 * 1024
#: Regions whose members heartbeat in one batch (bounds a batch's well-behaved traffic).
HEARTBEAT_REGIONS = 4
#: Batches between two progress lines in the log.
PROGRESS_EVERY = 100
#: Frames whose reply is still awaited (deferred merges); older ones are forgotten.
OUTSTANDING_MAX = 20_000


@attrs.define
class Crash:
    batch: int
    kind: str  # "exit" (the process ended) or "hang" (alive, no answer)
    returncode: int | None
    signature: str
    message: str
    frames: list[Frame]
    reproducer: list[Frame] | None = None
    needs_settle: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "signature": self.signature,
            "message": self.message,
            "kind": self.kind,
            "needs_settle": self.needs_settle,
            "frames": [f.to_json() for f in (self.reproducer or self.frames)],
            "minimized": self.reproducer is not None,
        }


@attrs.define
class FuzzReport:
    seed: int
    frames: int = 0
    member_frames: int = 0  # of which answers of a well-behaved member (acks, heartbeats)
    bytes: int = 0
    batches: int = 0
    crashes: list[Crash] = attrs.field(factory=list)
    kills: int = 0  # deliberate kill -9 (kill_every), each followed by a restart and a replay check
    violations: list[str] = attrs.field(factory=list)
    findings: dict[str, str] = attrs.field(factory=dict)
    acked_writes: int = 0
    rss_start_kb: int = 0
    rss_end_kb: int = 0
    peak_rss_kb: int = 0
    duration_s: float = 0.0

    @property
    def growth_per_byte(self) -> float:
        """RSS growth (end - start) per request byte sent."""
        return max(0, self.rss_end_kb - self.rss_start_kb) * 1024 / max(1, self.bytes)

    def signatures(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.crashes:
            out[c.signature] = out.get(c.signature, 0) + 1
        return out

    def summary(self) -> str:
        lines = [
            f"seed {self.seed}: {self.frames} frames ({self.member_frames} of them a member's answers; "
            f"{self.bytes / 1e6:.1f} MB) in {self.batches} batches, "
            f"{self.duration_s:.1f} s; {len(self.crashes)} crashes; {self.kills} deliberate kills; {len(self.violations)} model violations; "
            f"{self.acked_writes} acknowledged writes checked",
            f"RSS start {self.rss_start_kb / 1024:.1f} MiB, end {self.rss_end_kb / 1024:.1f} MiB, "
            f"peak {self.peak_rss_kb / 1024:.1f} MiB; growth {self.growth_per_byte:.3f} bytes per request byte",
        ]
        first = {}
        for c in self.crashes:
            first.setdefault(c.signature, c)
        for sig, n in self.signatures().items():
            c = first[sig]
            lines.append(f"  crash x{n}: {sig}: {c.message}")
            shown = c.reproducer or c.frames[-3:]
            label = "reproducer" if c.reproducer else "last frames"
            for f in shown[-4:]:
                lines.append(f"    {label}{' (+settle)' if c.needs_settle else ''}: {f.describe(240)}")
        for v in self.violations[:20]:
            lines.append(f"  violation: {v}")
        for sig, example in self.findings.items():
            lines.append(f"  finding: {sig}: {example}")
        return "\n".join(lines)


_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Transition|Failed)\w*)(?::\s*(.*))?$")
_FILE_LINE = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')


def crash_signature(log_text: str) -> tuple[str, str]:
    """(signature, message) of the last traceback in a coordinator log: exception type and innermost frame."""
    lines = log_text.splitlines()
    start = max((i for i, line in enumerate(lines) if line.startswith("Traceback")), default=None)
    if start is None:
        tail = [line for line in lines if "ERROR" in line or "CRITICAL" in line]
        return ("no traceback", tail[-1][-200:] if tail else "(no error logged)")
    where = "?"
    for line in lines[start + 1 :]:
        m = _FILE_LINE.match(line)
        if m:
            where = f"{Path(m.group(1)).name}:{m.group(3)}"
            continue
        e = _EXC_LINE.match(line)
        if e:
            return (f"{e.group(1)} in {where}", (e.group(2) or "")[:200])
    return (f"unparsed traceback in {where}", lines[-1][-200:])


class CampaignAborted(Exception):
    """The coordinator cannot be started again: the run ends with what it found."""


class Campaign:
    def __init__(
        self,
        work_dir: Path,
        frames: int,
        *,
        seed: int = 0,
        batch: int = BATCH,
        time_budget_s: float | None = None,
        verify_every: int = 10,
        kill_every: int | None = None,
        coordinator_args: Sequence[str] = (),
        log: Callable[[str], None] = lambda s: None,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.target_frames = frames
        self.seed = seed
        self.batch = batch
        self.time_budget_s = time_budget_s
        self.verify_every = verify_every
        self.kill_every = kill_every
        self.log = log
        self.handlers = discover_handlers()
        self.model = AckModel()
        self.report = FuzzReport(seed=seed)
        self.target = Target(
            self.work_dir / "state", log_path=self.work_dir / "coordinator.log", extra_args=coordinator_args
        )
        self._rids = itertools.count()
        self._outstanding: dict[str, Frame] = {}
        self._pushes: list[dict[str, Any]] = []
        #: Per region, the offsets of its last pushed reset or resume: where a
        #: well-behaved member's next interval begins (the continuity fence).
        self._consistent: dict[str, dict[tuple[Any, Any], Any]] = {}
        self._previous: list[Frame] = []
        self._started = 0.0
        self._last_rss = 0
        self._aborted: CampaignAborted | None = None

    # ------------------------------------------------------------------ run
    def run(self) -> FuzzReport:
        self._started = time.monotonic()
        self.target.start()
        self.report.rss_start_kb = self._last_rss = self.target.rss_kb() or 0
        try:
            round_ = 0
            while not self._done():
                left = -(-(self.target_frames - self.report.frames) // self.batch)
                self._run_round(self.seed * 1000 + round_, left)
                round_ += 1
            self._verify_or_crash("end of run", self._previous)
            self.report.rss_end_kb = self.target.rss_kb() or 0
            self._sample_rss()
        except CampaignAborted as exc:
            self.log(f"campaign aborted: {exc}")
        finally:
            self.target.stop()
        self.report.duration_s = time.monotonic() - self._started
        self.report.violations = list(self.model.violations)
        self.report.findings = dict(self.model.findings)
        self.report.acked_writes = self.model.acked_writes
        return self.report

    def _done(self) -> bool:
        if self.report.frames >= self.target_frames:
            return True
        return self.time_budget_s is not None and time.monotonic() - self._started > self.time_budget_s

    def _run_round(self, seed: int, batches: int) -> None:
        @hypothesis.seed(seed)
        @settings(
            max_examples=max(1, batches),
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(st.data())
        def one_batch(data: st.DataObject) -> None:
            # Every example draws the same way whatever the coordinator did (hypothesis
            # requires it): the frames, then one seed for the answers to pushed commands.
            build = frame_builder(data.draw, self.handlers)
            frames = [build(self._rid()) for _ in range(self.batch)]
            rng = random.Random(data.draw(st.integers(0, 2**32 - 1)))
            if not self._done() and self._aborted is None:
                try:
                    self._batch(frames, rng)
                except CampaignAborted as exc:
                    self._aborted = exc  # not raised through hypothesis, which would replay the batch

        one_batch()
        if self._aborted is not None:
            raise self._aborted

    def _rid(self) -> str:
        return f"f{next(self._rids):09d}"  # fixed width: draws never depend on the id's length

    # ------------------------------------------------------------------ one batch
    def _batch(self, frames: list[Frame], rng: random.Random) -> None:
        frames = frames + self._member_answers(rng)
        self.report.batches += 1
        for frame in frames:
            self.target.send(frame)
            self.report.frames += 1
            self.report.member_frames += frame.mutation == "member"
            self.report.bytes += sum(len(p) for p in frame.parts)
            if frame.rid is not None:
                self._outstanding[frame.rid] = frame
        if self.kill_every and self.report.batches % self.kill_every == 0:
            self.target.proc.kill()  # a deliberate kill -9 mid-batch: the restart must keep every acked write
        replies = self.target.barrier()
        if replies is not None:
            self._absorb(replies)
        if replies is None or not self.target.alive():
            self._crashed(frames, deliberate=bool(self.kill_every) and self.report.batches % self.kill_every == 0)
        else:
            self._sample_rss(frames)
            if self.report.batches % self.verify_every == 0:
                self._verify_or_crash(f"batch {self.report.batches}", frames)
            if self.report.batches % PROGRESS_EVERY == 0:
                self.log(
                    f"{self.report.frames} frames, {len(self.report.crashes)} crashes, "
                    f"RSS {(self.target.rss_kb() or 0) / 1024:.1f} MiB"
                )
        self._previous = frames
        if len(self._outstanding) > OUTSTANDING_MAX:
            for rid in list(self._outstanding)[: len(self._outstanding) - OUTSTANDING_MAX]:
                del self._outstanding[rid]

    def _member_answers(self, rng: random.Random) -> list[Frame]:
        """A well-behaved member's answers to the commands pushed since the last batch."""
        out: list[Frame] = []
        pushes, self._pushes = self._pushes[-20:], []
        for push in pushes:
            region, cmd = push.get("region"), push.get("cmd")
            if cmd in ("reset", "resume") and isinstance(region, str) and isinstance(push.get("offsets"), list):
                self._consistent[region] = {
                    (e[0], e[1]): e[2] for e in push["offsets"] if isinstance(e, list) and len(e) == 3
                }
            command = {"drain": "drain", "checkpoint": "checkpoint", "reset": "reset", "reset_to_initial": "reset"}.get(
                cmd
            )
            if command is None or not isinstance(region, str) or rng.random() < 0.5:
                continue
            start = self._consistent.get(region, {}).get(("t0", 0))
            for member, incarnation in sorted(self.model.joined.get(region, ())):
                begin = start if isinstance(start, int) else rng.randrange(1000)
                body = {
                    "region": region,
                    "member": member,
                    "incarnation": incarnation,
                    "command": command,
                    "seq": push.get("seq"),
                    "attempt": push.get("attempt"),
                    "ok": rng.random() < 0.75,
                    "error": None,
                    "offsets": [["t0", 0, begin, begin + rng.randrange(50)]] if command == "checkpoint" else None,
                }
                out.append(_plain("region_ack", body, self._rid()))
        joined = sorted(self.model.joined.items())
        # heartbeats for a few regions per batch: enough to keep some alive, bounded however many joined
        for region, members in rng.sample(joined, min(len(joined), HEARTBEAT_REGIONS)):
            for member, incarnation in sorted(members):
                out.append(
                    _plain(
                        "region_heartbeat",
                        {"region": region, "member": member, "incarnation": incarnation},
                        self._rid(),
                    )
                )
        return out

    def _absorb(self, replies: list[Reply]) -> None:
        for reply in replies:
            if reply.type == "region_command" and isinstance(reply.body, dict):
                self._pushes.append(reply.body)
                continue
            frame = self._outstanding.pop(reply.id, None) if isinstance(reply.id, str) else None
            if frame is not None:
                self.model.observe(frame, reply)

    def _sample_rss(self, frames: list[Frame] | None = None) -> None:
        peak = self.target.peak_rss_kb()
        if peak is not None:
            self.report.peak_rss_kb = max(self.report.peak_rss_kb, peak)
        rss = self.target.rss_kb()
        if rss is not None and frames is not None and self._last_rss and rss - self._last_rss > RSS_JUMP_KB:
            sizes = sorted(frames, key=lambda f: -sum(map(len, f.parts)))
            self.model.findings.setdefault(
                f"memory: RSS grew more than {RSS_JUMP_KB // 1024} MiB in one batch",
                f"+{(rss - self._last_rss) // 1024} MiB; " + "; ".join(f.describe(160) for f in sizes[:2]),
            )
        if rss is not None:
            self._last_rss = rss

    def _crashed(self, frames: list[Frame], deliberate: bool = False) -> None:
        alive = self.target.alive()
        self._sample_rss()
        if alive:
            self.target.proc.kill()  # a hang: SIGKILL, then the same restart
        if deliberate:
            self.report.kills += 1
        else:
            signature, message = crash_signature(self.target.log_tail(400))
            kind = "hang" if alive else "exit"
            crash = Crash(
                self.report.batches,
                kind,
                self.target.proc.returncode,
                f"{kind}: {signature}",
                message,
                self._previous + frames,
            )
            self.report.crashes.append(crash)
            self.log(f"batch {self.report.batches}: coordinator {kind} ({signature}: {message[:120]})")
        for frame in frames:
            if frame.rid in self._outstanding:
                self.model.unanswered(self._outstanding.pop(frame.rid))
        self._pushes.clear()
        self._consistent.clear()
        self.model.joined.clear()  # the restarted coordinator forgot the members (they must join again)
        try:
            self.target.restart()
        except CoordinatorStartError as exc:
            # The state left by the crash does not load: every acknowledged write is unreachable.
            self.model.violations.append(
                f"the coordinator does not start on its state dir after the crash at "
                f"batch {self.report.batches}: {str(exc).splitlines()[0]}"
            )
            raise CampaignAborted(str(exc)) from None
        self._last_rss = self.target.rss_kb() or 0
        try:
            self._verify(f"replay after crash at batch {self.report.batches}")
        except CoordinatorUnavailable as exc:
            # It stops again right after the restart: a crash loop (the state it replays stops it).
            self.model.violations.append(
                f"the coordinator stops again right after restarting on its state dir "
                f"(crash at batch {self.report.batches}): {crash_signature(self.target.log_tail(400))}"
            )
            raise CampaignAborted(str(exc)) from None

    def _verify_or_crash(self, when: str, frames: list[Frame]) -> None:
        try:
            self._verify(when)
        except CoordinatorUnavailable:  # it stopped (or hung) after the barrier: a crash like any other
            self._crashed(frames)

    def _verify(self, when: str) -> None:
        with CoordinatorClient(self.target.proc.endpoint, timeout=30) as client:
            for v in self.model.verify(client):
                self.log(f"{when}: {v}")


def _plain(msg_type: str, body: dict[str, Any], rid: str) -> Frame:
    return Frame(
        (json.dumps({"v": 1, "id": rid, "type": msg_type, "body": body}).encode(),), "member", msg_type, rid, body, True
    )


# --------------------------------------------------------------------------- minimisation


def replay(frames: list[Frame], settle: bool, work_dir: Path | None = None) -> tuple[int | None, str]:
    """Send ``frames`` one at a time to a fresh coordinator (a ping after each).

    Returns (index of the frame after which it died, or len(frames) if it died
    only after the settle wait, or None if it survived; crash signature).
    """
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        target = Target(Path(tmp) / "state", log_path=Path(tmp) / "coordinator.log").start()
        try:
            for i, frame in enumerate(frames):
                target.send(frame)
                if target.barrier(timeout=10.0) is None or not target.alive():
                    return i, _signature(target)
            if settle:
                time.sleep(SETTLE_S)
                if target.barrier(timeout=10.0) is None or not target.alive():
                    return len(frames), _signature(target)
            return None, ""
        finally:
            target.stop()


def _signature(target: Target) -> str:
    kind = "exit" if not target.alive() else "hang"
    return f"{kind}: {crash_signature(target.log_tail(400))[0]}"


def minimize(crash: Crash, work_dir: Path | None = None, trials: int = MINIMIZE_TRIALS) -> None:
    """Shrink ``crash.frames`` to a reproducer on a fresh state dir (sets ``crash.reproducer``)."""
    frames = list(crash.frames)
    index, sig = replay(frames, settle=True, work_dir=work_dir)
    if index is None or sig != crash.signature:
        return
    settle = index == len(frames)
    frames = frames[: index + 1]
    budget = [trials - 1]

    def still(candidate: list[Frame]) -> bool:
        if budget[0] <= 0:
            return False
        budget[0] -= 1
        i, s = replay(candidate, settle=settle, work_dir=work_dir)
        return i is not None and s == crash.signature

    if not settle and still(frames[-1:]):
        frames = frames[-1:]
    else:
        # ddmin on the frames before the last one (the one it died on, or the last before the settle).
        head, last = frames[:-1], frames[-1:]
        chunk = max(1, len(head) // 2)
        while chunk >= 1 and head and budget[0] > 0:
            i = 0
            removed = False
            while i < len(head) and budget[0] > 0:
                candidate = head[:i] + head[i + chunk :]
                if still(candidate + last):
                    head = candidate
                    removed = True
                else:
                    i += chunk
            if not removed:
                chunk //= 2
        frames = head + last
    crash.reproducer = frames
    crash.needs_settle = settle
