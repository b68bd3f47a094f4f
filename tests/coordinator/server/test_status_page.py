"""The coordinator's HTTP status page (/), /healthz and /ready.

A real coordinator process with real regions: members join through the real
control channel (``ControlChannel``) and answer the controller's commands, one
region checkpoints, one fails (its drains fail until the consecutive-reset
maximum), one has hostile names. The page is checked as served and as a
person sees it in headless Chromium (``--dump-dom``), and a screenshot is kept
under ``test-artifacts/``.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.protocol.common.waiting import wait_until
from coordinator.protocol.region.kafka_report import KafkaReport
from coordinator.protocol.region.replies import RegionPhase
from coordinator.protocol.region.status import CheckpointMark, MemberStatus, RegionStatus, ResetMark, ResetStatus
from coordinator.protocol.wire.status import (
    CoordinatorStatus,
    GroupStatus,
    MergeStatus,
    PendingMerge,
    RegistryStatus,
    Role,
)
from coordinator.server.http import HttpEndpoint
from coordinator.server.loop import CoordinatorServer
from coordinator.server.status_page import render_page
from coordinator.store.state_store import StateStore

from support.paths import REPO
from support.scripted_member import all_regions, member

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = REPO / "test-artifacts"
HOSTILE_REGION = '<script>document.title="pwned"</script>'
HOSTILE_MEMBER = '<img src=x onerror="document.body.dataset.pwned=1">'


def _get(address: str, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    assert os.access(CHROMIUM, os.X_OK), (
        f"{CHROMIUM} is missing: run `make chromium` (as root it installs the Debian package chromium)"
    )
    profile = tmp_path / "chromium-profile"
    return subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=120
    )


def _visible_text(dom: str) -> str:
    """Text a person reads: the body without tags, entities decoded, blanks collapsed."""
    body = dom.split("<body", 1)[1]
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body)))


@pytest.fixture
def regions(coordinator_http, names):
    """Three live regions: 'good' checkpointing, 'bad' FAILED, a hostile-named one."""
    endpoint = coordinator_http.endpoint
    good, bad = names.group("orders"), names.group("payments")
    members = [
        member(endpoint, good, "orders-member-1").start(),
        member(endpoint, good, "orders-member-2", partition=1).start(),
        member(endpoint, bad, "payments-member-1", fail_drain=True).start(),
        member(endpoint, HOSTILE_REGION, HOSTILE_MEMBER).start(),
    ]
    try:
        wait_until(
            lambda: (
                (r := all_regions(endpoint).get(good)) is not None
                and len(r.members) == 2
                and (r.last_consistent or 0) >= 2
                and r.phase is not RegionPhase.RESETTING
            ),
            30,
            "two members, two checkpoints",
        )
        wait_until(
            lambda: (r := all_regions(endpoint).get(bad)) is not None and r.phase is RegionPhase.FAILED,
            30,
            "the failing region FAILED",
        )
        wait_until(
            lambda: (r := all_regions(endpoint).get(HOSTILE_REGION)) is not None and HOSTILE_MEMBER in r.members,
            30,
            "the hostile member joined",
        )
        yield good, bad
    finally:
        for m in members:
            m.stop()


def test_page_shows_regions_members_and_failure_in_chromium(coordinator_http, regions, tmp_path):
    good, bad = regions
    addr = coordinator_http.http_address
    status = all_regions(coordinator_http.endpoint)
    reason = status[bad].failed_reason
    assert reason

    code, ctype, page = _get(addr, "/")
    assert code == 200
    assert ctype.startswith("text/html")
    # names from clients are escaped: no markup of theirs reaches the page
    assert HOSTILE_REGION not in page
    assert HOSTILE_MEMBER not in page
    assert html.escape(HOSTILE_REGION) in page
    assert html.escape(HOSTILE_MEMBER) in page
    assert "<script" not in page.lower()

    url = f"http://{addr}/"
    r = _chromium(tmp_path, "--dump-dom", url)
    assert r.returncode == 0, r.stderr[-2000:]
    dom = r.stdout
    text = _visible_text(dom)
    for expected in (
        good,
        bad,
        "orders-member-1",
        "orders-member-2",
        "payments-member-1",
        "FAILED",
        "why FAILED: " + reason,
        HOSTILE_REGION,
        HOSTILE_MEMBER,
        "Recent checkpoints",
        "Recent resets",
        "failure streak",
        "/metrics",
    ):
        assert expected in text, f"{expected!r} not visible on the page"
    assert "<title>crkafka coordinator status</title>" in dom  # the hostile script did not run
    assert "data-pwned" not in dom
    assert "<img" not in dom.lower()
    good_row = re.search(re.escape(good) + r" (\w+) (\d+) ", text)
    assert good_row
    assert good_row.group(1) in ("RUNNING", "DRAINING", "CHECKPOINTING")
    assert int(good_row.group(2)) >= 2  # the last consistent checkpoint
    # the failed region's row: ... resets, consecutive/max, the failure streak (its drains failed in a row)
    bad_row = re.search(re.escape(bad) + r" FAILED .*? (\d+)/(\d+) (\d+) \d+", text)
    assert bad_row, f"no row for {bad} in {text[:2000]!r}"
    assert int(bad_row.group(3)) >= 2
    assert int(bad_row.group(3)) == status[bad].reset.failure_streak

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "status-page.png"
    shot.unlink(missing_ok=True)
    r = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,1400", "--hide-scrollbars", url)
    assert r.returncode == 0, r.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 10_000
    print(f"status page screenshot: {shot}")


def test_healthz_ready_and_not_found(coordinator_http):
    addr = coordinator_http.http_address
    assert _get(addr, "/healthz")[::2] == (200, "ok\n")
    assert _get(addr, "/ready")[::2] == (200, "ready\n")
    assert _get(addr, "/nope")[0] == 404
    code, _ctype, page = _get(addr, "/?x=1")
    assert code == 200
    assert "No region has joined yet." in page


def test_not_ready_and_unhealthy_before_the_loop_runs(tmp_path):
    """An endpoint over a server whose loop has not started and whose log is not replayed."""
    store = StateStore(tmp_path / "state")
    server = CoordinatorServer(store, "tcp://127.0.0.1:0")
    endpoint = HttpEndpoint("127.0.0.1:0", server, _metrics())
    endpoint.start()
    try:
        code, _, body = _get(endpoint.address, "/ready")
        assert code == 503
        assert "replaying" in body
        code, _, body = _get(endpoint.address, "/healthz")
        assert code == 503
        assert "stopped" in body
    finally:
        endpoint.stop()


def _metrics():
    from coordinator.server.metrics import CoordinatorMetrics

    return CoordinatorMetrics()


# ---------------------------------------------------------------------------- the page as a pure function

_PAGE_TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "h1",
    "h2",
    "p",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "span",
    "code",
    "a",
}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.attributes: set[str] = set()
        self.links: set[str] = set()
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attributes.update(name for name, _ in attrs)
        self.links.update(value for name, value in attrs if name == "href")

    def handle_data(self, data):
        self.text.append(data)


def _region(name: str) -> RegionStatus:
    return RegionStatus(
        name=name,
        index=0,
        phase=RegionPhase.FAILED,
        mode="periodic",
        period_s=1.0,
        members={name: MemberStatus(1, "inc", 0.1, KafkaReport("m", 2), None, None)},
        last_consistent=3,
        seq=3,
        waiting_for=(),
        reset=ResetStatus(attempt=1, consecutive_resets=1, max_consecutive_resets=5, resets=1),
        checkpoints=3,
        failed_cycles=1,
        failed_reason=name,
        transactions={},
        recent_checkpoints=(CheckpointMark(1.0, 3),),
        recent_resets=(ResetMark(2.0, name),),
    )


def _group(name: str) -> GroupStatus:
    return GroupStatus(0, (name,), 1, False, 1)


def _snapshot(name: str, groups: dict[str, GroupStatus] | None = None) -> CoordinatorStatus:
    """A snapshot where every client-given string is ``name``."""
    return CoordinatorStatus(
        endpoint="tcp://127.0.0.1:5570",
        loaded=True,
        uptime_s=1.5,
        store=None,
        load=None,
        limits={"max_regions": 1000},
        registry=RegistryStatus({name: _group(name)} if groups is None else groups, 1, {name: 2}),
        merge=MergeStatus((PendingMerge(name, 1, 0, 2, (name,), (), 0.2),), 0, 0, 0),
        regions={name: _region(name)},
    )


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=60)
    | st.sampled_from(
        [
            HOSTILE_REGION,
            HOSTILE_MEMBER,
            '"><a href="javascript:x">',
            "' onmouseover='x",
            "</td></tr></table><script>x</script>",
            "&lt;b&gt;",
            "<!--",
            "]]>",
        ]
    )
)
def test_every_name_is_escaped(name):
    page = render_page(_snapshot(name)).decode()
    parser = _Tags()
    parser.feed(page)
    parser.close()
    assert parser.tags <= _PAGE_TAGS  # no element of the name's making
    assert parser.attributes <= {"lang", "charset", "http-equiv", "content", "class", "colspan", "href"}
    assert parser.links == {"/status", "/metrics", "/healthz", "/ready"}
    text = "".join(parser.text)
    assert text.count(name) >= 6  # region, member, group, merge, reset cause, FAILED reason: shown as text


def test_tables_are_bounded():
    snap = _snapshot("r", groups={f"g{i:05d}": GroupStatus(0, (), 0, False, 0) for i in range(1200)})
    page = render_page(snap).decode()
    assert "g00499" in page
    assert "g00500" not in page
    assert "700 more rows" in page


def test_the_header_shows_the_role_the_leader_and_its_epoch():
    standby = attrs.evolve(_snapshot("g"), loaded=False, role=Role.STANDBY, leader="tcp://10.0.0.7:5570", epoch=12)
    page = render_page(standby).decode()
    assert '<span class="phase busy">standby</span> &middot; leader tcp://10.0.0.7:5570 &middot; epoch 12' in page
    leader = render_page(_snapshot("g")).decode()  # the defaults: a sole leader of epoch 0, no endpoint known
    assert '<span class="phase ok">leader</span> &middot; leader &ndash; &middot; epoch 0' in leader
