"""Wire fuzz of the coordinator (tests/fuzz): a short budget, the crash corpus, and the fuzzer's own checks.

The long run is ``make fuzz`` (bench/fuzz.py, 100,000 frames). Here:

* a short campaign against a real coordinator process (``FUZZ_FRAMES``,
  default 800 frames, ``FUZZ_SEED``): no crash, no hang, no acknowledged write
  lost or changed, no INTERNAL reply, no out-of-range echo;
* the same with a ``kill -9`` every few batches: the restart replays every
  acknowledged write (proves the replay check runs, whatever the build);
* every reproducer in tests/fuzz/corpus (inputs that stopped the coordinator
  before it validated them) is replayed: the coordinator must survive each;
* every message type the services register has a body schema, and the
  model and the crash parser detect what they must.
"""

from __future__ import annotations

import json
import os

import pytest

from fuzz.campaign import Campaign, crash_signature, replay
from fuzz.frames import Frame
from fuzz.model import AckModel
from fuzz.schemas import TRACKED_GROUPS, body_schemas, discover_handlers
from fuzz.target import Reply
from fuzz.values import Token, encode_json
from support.paths import TESTS

CORPUS = sorted((TESTS / "fuzz" / "corpus").glob("*.json"))
FRAMES = int(os.environ.get("FUZZ_FRAMES", "800"))
SEED = int(os.environ.get("FUZZ_SEED", "0"))


def test_short_fuzz_campaign_finds_no_crash_and_loses_no_write(tmp_path):
    report = Campaign(tmp_path, FRAMES, seed=SEED, time_budget_s=25.0).run()
    summary = report.summary()
    assert report.frames >= min(FRAMES, 100), summary
    assert report.crashes == [], summary
    assert report.violations == [], summary
    assert report.findings == {}, summary


#: Count limits far below the fuzzer's name pools, so LIMIT_EXCEEDED paths run (leases and
#: region expiry are left at their defaults: they change state without a request, which
#: the model of acknowledged writes does not predict).
TIGHT_LIMITS = [
    "--max-groups=4",
    "--max-members-per-group=2",
    "--max-regions=5",
    "--max-pending-merges=3",
    "--max-pending-merge-bytes=20000",
    "--max-control-variables-per-group=20",
]


def test_short_fuzz_campaign_under_tight_limits(tmp_path):
    report = Campaign(tmp_path, FRAMES // 2, seed=SEED + 2, time_budget_s=20.0, coordinator_args=TIGHT_LIMITS).run()
    summary = report.summary()
    assert report.crashes == [], summary
    assert report.violations == [], summary
    assert report.findings == {}, summary


def test_replay_after_kill_keeps_every_acknowledged_write(tmp_path):
    report = Campaign(tmp_path, 150, seed=SEED + 1, kill_every=2, time_budget_s=25.0).run()
    summary = report.summary()
    assert report.kills >= 2, summary
    assert report.acked_writes > 0, summary
    assert report.violations == [], summary


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_reproducer_no_longer_stops_the_coordinator(path, tmp_path):
    entry = json.loads(path.read_text())
    frames = [Frame.from_json(f) for f in entry["frames"]]
    index, signature = replay(frames, settle=entry["needs_settle"], work_dir=tmp_path)
    assert index is None, f"{path.name} ({entry['signature']}) stopped the coordinator again: {signature}"


def test_every_registered_message_type_has_a_schema():
    handlers = discover_handlers()
    schemas = body_schemas(TRACKED_GROUPS)
    assert {"ping", "register", "put_initial_offsets", "merge_checkpoint", "region_join", "region_ack"} <= set(handlers)
    assert sorted(set(handlers) - set(schemas)) == [], "new message types need a body schema in tests/fuzz/schemas.py"


def test_encoder_writes_surrogates_both_ways_and_splices_tokens():
    assert encode_json({"id": "\ud800"}) == b'{"id":"\\ud800"}'
    assert encode_json({"id": "\ud800"}, ascii_escapes=False) == b'{"id":"\xed\xa0\x80"}'
    assert encode_json({"n": Token(b"1e999"), "s": [Token(b'"\xff"')]}) == b'{"n":1e999,"s":["\xff"]}'


def test_crash_parser_names_exception_and_innermost_frame():
    log = """2026 INFO x
2026 ERROR coordinator.server.loop [coordinator-loop] coordinator loop failed; stopping
Traceback (most recent call last):
  File "/w/coordinator/server/loop.py", line 304, in _run
    self._commit.commit_and_send(sock)
  File "/w/coordinator/protocol/wire/envelope.py", line 64, in _dumps
    return json.dumps(obj).encode("utf-8")
UnicodeEncodeError: 'utf-8' codec can't encode character '\\ud800'
2026 ERROR coordinator coordinator stopped after a failure
"""
    assert crash_signature(log) == (
        "UnicodeEncodeError in envelope.py:_dumps",
        "'utf-8' codec can't encode character '\\ud800'",
    )


def _frame(msg_type, body, rid="f1"):
    return Frame((b"",), "valid", msg_type, rid, body, True)


def test_model_flags_lost_and_invented_writes():
    model = AckModel()
    model.observe(
        _frame("register", {"group": "g0", "region_index": 0, "operator": "op0"}),
        Reply("f1", "register_reply", {"members": ["op0"], "region_index": 0}, b""),
    )
    model.observe(
        _frame("put_initial_offsets", {"group": "g0", "offsets": [["t", 0, 5]]}),
        Reply("f2", "put_initial_offsets_reply", {"offsets": [["t", 0, 5]]}, b""),
    )
    assert model.violations == []
    assert model.acked_writes == 2
    # first writer wins: a later put must not change the acknowledged value
    model.observe(
        _frame("put_initial_offsets", {"group": "g0", "offsets": [["t", 0, 9]]}),
        Reply("f3", "put_initial_offsets_reply", {"offsets": [["t", 0, 9]]}, b""),
    )
    # a read that lost the member
    model.observe(
        _frame("members", {"group": "g0"}), Reply("f4", "members_reply", {"members": [], "region_index": 0}, b"")
    )
    # a group nobody registered
    model.observe(
        _frame("members", {"group": "g1"}), Reply("f5", "members_reply", {"members": ["x"], "region_index": 0}, b"")
    )
    assert len(model.violations) == 3, model.violations


def test_model_reports_internal_replies_and_out_of_range_echoes():
    model = AckModel()
    model.observe(
        _frame("merge_checkpoint", {"group": "u0"}),
        Reply("f1", "error", {"code": "INTERNAL", "message": "OverflowError: int too large"}, b""),
    )
    model.observe(
        _frame("merge_checkpoint", {"group": "u0"}),
        Reply("f2", "merge_checkpoint_reply", {"offsets": [["t", 2**31, 2**64]], "contributors": []}, b""),
    )
    model.observe(
        _frame("register", {"group": "u0", "operator": "a\nb"}),
        Reply("f3", "register_reply", {"members": ["a\nb"], "region_index": 0}, b""),
    )
    assert len(model.findings) == 4, model.findings
