"""The coordinator's human-readable status page (HTTP ``/``), rendered from the status snapshot.

A static HTML document (no script; a meta refresh reloads it every
``REFRESH_S``). Every value taken from the snapshot is escaped: region,
member and group names come from clients and may hold markup.

The header names this coordinator's endpoint and role (leader, standby, loading),
the leader it knows and the leader's epoch. Sections: regions (phase, last consistent checkpoint, resets, why FAILED),
members, recent checkpoints and resets, where lag is (the coordinator does
not read Kafka), registered groups and pending merges, limits and rejections.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable

from coordinator.protocol.wire.status import CoordinatorStatus

#: Seconds between the page's automatic reloads.
REFRESH_S = 5
#: Rows shown per table: a coordinator may hold 1,000 regions of 1,000 members;
#: the page stays a size a browser renders at once, /status has every row.
MAX_ROWS = 500
#: Recent checkpoints shown per region (the controller keeps more; /status has them all).
CHECKPOINTS_SHOWN = 3
#: Phases with a colour of their own; any other value is shown uncoloured.
_PHASE_CLASSES = {
    "RUNNING": "ok",
    "DRAINING": "busy",
    "CHECKPOINTING": "busy",
    "RESETTING": "warn",
    "BACKOFF": "warn",
    "WAITING": "warn",
    "FAILED": "bad",
}

#: This coordinator's role, coloured like the phases.
_ROLE_CLASSES = {"leader": "ok", "standby": "busy", "loading": "warn"}

_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em;color:#1d2330;background:#f6f7f9}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
.meta{color:#5a6270;margin:0 0 1em}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px #0002;margin-bottom:.4em}
th,td{padding:.3em .8em;text-align:left;border-bottom:1px solid #e3e6ea;vertical-align:top}
th{background:#eef0f3;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.phase{font-weight:600;padding:.1em .5em;border-radius:.3em}
.ok{background:#d6f5dd;color:#135a23}.busy{background:#dde8fb;color:#1b3f87}
.warn{background:#fff1c7;color:#6b4d00}.bad{background:#fbd9d9;color:#8a1414}
td.t,td.name{white-space:nowrap}
tr.why td{border-top:0;padding-top:0;color:#8a1414;font-weight:600}.none{color:#5a6270;font-style:italic}
code{background:#eef0f3;padding:0 .3em;border-radius:.2em}
"""


def _e(value: object) -> str:
    return "&ndash;" if value is None else html.escape(str(value), quote=True)


def _when(t: float) -> str:
    return html.escape(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)))


def _table(headers: list[str], rows: Iterable[list[str]], empty: str) -> str:
    """``rows`` hold cells already escaped (HTML fragments); at most MAX_ROWS are shown."""
    return _html_table(headers, ["<tr>" + "".join(row) + "</tr>" for row in rows], empty)


def _html_table(headers: list[str], trs: list[str], empty: str, limit: int = MAX_ROWS) -> str:
    if not trs:
        return f'<p class="none">{html.escape(empty)}</p>'
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    more = (
        f'<p class="meta">{len(trs) - limit} more rows: see <a href="/status">/status</a>.</p>'
        if len(trs) > limit
        else ""
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(trs[:limit])}</tbody></table>{more}"


def _td(value: object, num: bool = False) -> str:
    return f'<td class="num">{_e(value)}</td>' if num else f"<td>{_e(value)}</td>"


def _name(value: object) -> str:
    """A region, member or group name: kept on one line (names often hold hyphens)."""
    return f'<td class="name">{_e(value)}</td>'


def _phase(phase: str) -> str:
    cls = _PHASE_CLASSES.get(phase, "")
    return f'<td><span class="phase {cls}">{_e(phase)}</span></td>'


def render_page(snap: CoordinatorStatus) -> bytes:
    """The whole page for one status snapshot (``CoordinatorServer.status_snapshot``)."""
    regions = snap.regions or {}
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="refresh" content="{REFRESH_S}">',
        "<title>crkafka coordinator status</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>crkafka coordinator</h1>",
        f'<p class="meta">{_e(snap.endpoint)} &middot; '
        f"{'log replayed, serving' if snap.loaded else 'replaying the log (not ready)'} &middot; "
        f"up {_e(snap.uptime_s)} s &middot; page generated {_when(time.time())}, "
        f"reloads every {REFRESH_S} s</p>",
        f'<p class="meta">role <span class="phase {_ROLE_CLASSES.get(snap.role.value, "")}">{_e(snap.role.value)}'
        f"</span> &middot; leader {_e(snap.leader)} &middot; epoch {_e(snap.epoch)}</p>",
    ]

    parts.append(f"<h2>Regions ({len(regions)})</h2>")
    body = []
    for name, r in sorted(regions.items())[:MAX_ROWS]:
        body.append(
            "<tr>"
            + "".join(
                [
                    _name(name),
                    _phase(r.phase.value),
                    _td(r.last_consistent, True),
                    _td(r.checkpoints, True),
                    _td(r.reset.resets, True),
                    _td(f"{r.reset.consecutive_resets}/{r.reset.max_consecutive_resets}", True),
                    _td(r.reset.failure_streak, True),
                    _td(len(r.members), True),
                ]
            )
            + "</tr>"
        )
        if r.failed_reason:
            body.append(f'<tr class="why"><td colspan="8">why FAILED: {_e(r.failed_reason)}</td></tr>')
    headers = [
        "region",
        "phase",
        "last consistent checkpoint",
        "checkpoints",
        "resets",
        "consecutive resets",
        "failure streak",
        "members",
    ]
    # at most MAX_ROWS regions, each with its FAILED reason row
    parts.append(_html_table(headers, body, "No region has joined yet.", limit=2 * MAX_ROWS))
    if len(regions) > MAX_ROWS:
        parts.append(f'<p class="meta">{len(regions) - MAX_ROWS} more regions: see <a href="/status">/status</a>.</p>')

    rows = [
        [
            _name(name),
            _name(member),
            _td(info.pid, True),
            _td(info.silent_s, True),
            _td(None if info.kafka is None else info.kafka.generation, True),
        ]
        for name, r in sorted(regions.items())
        for member, info in sorted(r.members.items())
    ]
    parts.append(f"<h2>Members ({len(rows)})</h2>")
    parts.append(_table(["region", "member", "pid", "silent (s)", "Kafka generation"], rows, "No members."))

    parts.append("<h2>Recent checkpoints</h2>")
    rows = [
        [_name(name), _td(c.seq, True), f'<td class="t">{_when(c.t)}</td>']
        for name, r in sorted(regions.items())
        for c in r.recent_checkpoints[:CHECKPOINTS_SHOWN]
    ]
    parts.append(_table(["region", "checkpoint", "consistent at"], rows, "No checkpoint completed yet."))
    if any(len(r.recent_checkpoints) > CHECKPOINTS_SHOWN for r in regions.values()):
        parts.append(
            f'<p class="meta">The newest {CHECKPOINTS_SHOWN} per region; <a href="/status">/status</a> has more.</p>'
        )

    parts.append("<h2>Recent resets</h2>")
    rows = [
        [_name(name), f'<td class="t">{_when(x.t)}</td>', _td(x.why)]
        for name, r in sorted(regions.items())
        for x in r.recent_resets
    ]
    parts.append(_table(["region", "started at", "why"], rows, "No reset since the coordinator started."))

    parts.append("<h2>Lag</h2>")
    parts.append(
        "<p>The coordinator does not read Kafka. Per-partition committed offset and consumer lag are "
        "served by each member's <code>/metrics</code> endpoint (<code>--metrics-port</code>), and "
        "<code>crkafka status --coordinator ENDPOINT --bootstrap HOST:PORT</code> reads them from the "
        "broker.</p>"
    )

    groups = {} if snap.registry is None else snap.registry.groups
    parts.append(f"<h2>Registered groups ({len(groups)})</h2>")
    rows = [
        [
            _name(g),
            _td(v.region_index, True),
            _td(", ".join(v.members)),
            _td("yes" if v.reset_pending else "no"),
            _td(v.control_variables, True),
        ]
        for g, v in sorted(groups.items())
    ]
    parts.append(
        _table(["group", "region index", "members", "reset pending", "control variables"], rows, "No registered group.")
    )
    merges = () if snap.merge is None else snap.merge.pending
    parts.append(f"<h2>Pending checkpoint merges ({len(merges)})</h2>")
    rows = [
        [
            _name(m.group),
            _td(m.seq, True),
            _td(m.attempt, True),
            _td(f"{len(m.contributors)}/{m.n_contributors}"),
            _td(m.age_s, True),
        ]
        for m in merges
    ]
    parts.append(_table(["group", "checkpoint", "attempt", "contributions", "age (s)"], rows, "None."))

    parts.append("<h2>Limits and rejections</h2>")
    rejections = {} if snap.registry is None else snap.registry.limit_rejections
    rows = [[_td(k), _td(v, True), _td(rejections.get(k, 0), True)] for k, v in sorted(snap.limits.items())]
    rows += [[_td(k), _td(None), _td(v, True)] for k, v in sorted(rejections.items()) if k not in snap.limits]
    parts.append(_table(["limit", "value", "requests refused"], rows, "No limits reported."))

    parts.append(
        '<p class="meta">Machine-readable: <a href="/status">/status</a> (JSON) &middot; '
        '<a href="/metrics">/metrics</a> (Prometheus) &middot; <a href="/healthz">/healthz</a> &middot; '
        '<a href="/ready">/ready</a></p></body></html>\n'
    )
    return "".join(parts).encode("utf-8")
