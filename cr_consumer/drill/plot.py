"""The drill's timeline plot (PNG, matplotlib, no display needed).

Top panel: records processed per second by each member (0.5 s bins, replays
included). Vertical markers on both panels: completed checkpoints (thin green
dotted), resets (red dashed), faults (black solid, labelled) and, after the
first records, members joining (+name) or leaving (-name) the region (grey:
a membership change, so a Kafka rebalance). Checkpoints, resets and
membership come from the controller's events when the drill watched it, else
from the members' probes. Bottom panel: cumulative records processed by the
whole region, with the produced total as a horizontal line.

matplotlib is optional (the ``plot`` extra): without it :func:`plot_timeline`
draws nothing and returns None, the drill still verifies, and the report says
the plot was skipped (:data:`SKIPPED_MESSAGE`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from cr_consumer.drill.report import checkpoint_events, per_member_series, reset_events
from cr_consumer.drill.timeline import Event

log = logging.getLogger(__name__)

SKIPPED_MESSAGE = "plot skipped: matplotlib is not installed (pip install 'cr-consumer[plot]')"


def matplotlib_available() -> bool:
    try:
        import matplotlib  # noqa: F401 (only whether it imports)
    except ImportError:
        return False
    return True


def plot_timeline(
    events: list[Event], path: str | os.PathLike[str], *, title: str, produced: int | None = None
) -> Path | None:
    """Write the plot to ``path`` and return it; None (logged) without matplotlib."""
    if not matplotlib_available():
        log.warning("%s", SKIPPED_MESSAGE)
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    if not events:
        raise ValueError("plot_timeline: no timeline events to plot")
    events = sorted(events, key=lambda e: e["t"])
    t0 = events[0]["t"]
    series = per_member_series(events)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(11, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1.4]})
    for member, (xs, ys) in series.items():
        ax.step(xs, ys, where="post", label=member, linewidth=1.3)
    ax.set_ylabel("records/s per member")
    fig.suptitle(title)

    first_batch = next((e["t"] for e in events if e["ev"] == "batch"), events[-1]["t"])
    peak = max((max(ys) for _, ys in series.values() if ys), default=1.0)
    ckpts = checkpoint_events(events)
    resets = reset_events(events)
    for e in ckpts:
        for a in (ax, ax2):
            a.axvline(e["t"] - t0, color="tab:green", linestyle=":", linewidth=0.8, alpha=0.7)
    for e in resets:
        for a in (ax, ax2):
            a.axvline(e["t"] - t0, color="tab:red", linestyle="--", linewidth=1.2)
    _mark_faults_and_membership(ax, ax2, events, t0, first_batch)

    # legend proxies for the markers
    ax.plot([], [], color="tab:green", linestyle=":", label=f"checkpoint complete ({len(ckpts)})")
    ax.plot([], [], color="tab:red", linestyle="--", label=f"reset ({len(resets)})")
    ax.plot([], [], color="black", label="fault")
    ax.plot([], [], color="grey", label="member joined (+) / left (-): rebalance")
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.01), fontsize=8, ncol=4, frameon=False)
    ax.set_ylim(0, max(peak, 1.0) * 1.15)  # headroom for the fault labels

    _plot_processed(ax2, events, t0, produced)
    ax2.set_ylabel("records")
    ax2.set_xlabel("seconds since the first event of the drill")
    ax2.legend(loc="lower right", fontsize=8)
    ax2.set_ylim(bottom=0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _mark_faults_and_membership(ax: Any, ax2: Any, events: list[Event], t0: float, first_batch: float) -> None:
    """A labelled line at each fault (both axes), a grey one at each member that
    joined or left after the first batch (a rebalance)."""
    n_label = 0
    for e in events:
        x = e["t"] - t0
        if e["ev"] == "fault":
            for a in (ax, ax2):
                a.axvline(x, color="black", linewidth=1.8)
            ax.annotate(
                e.get("fault", "fault"),
                (x, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(3, -12),
                textcoords="offset points",
                fontsize=9,
                fontweight="bold",
            )
        elif e["ev"] in ("ctl_join", "ctl_leave") and e["t"] > first_batch:
            # a member joined or left after the start: a membership change / rebalance
            sign = "+" if e["ev"] == "ctl_join" else "-"
            ax.axvline(x, color="grey", linewidth=0.8, alpha=0.6)
            n_label += 1
            ax.annotate(
                f"{sign}{e.get('ctl', {}).get('member', '?')}",
                (x, 0.0),
                xycoords=("data", "axes fraction"),
                xytext=(2, 4 + 11 * (n_label % 4)),
                textcoords="offset points",
                fontsize=7,
                color="dimgrey",
            )


def _plot_processed(ax2: Any, events: list[Event], t0: float, produced: int | None) -> None:
    """The running total of processed records (replays included), and the produced count."""
    xs, ys, total = [], [], 0
    for e in events:
        if e["ev"] == "batch":
            total += e["n"]
            xs.append(e["t"] - t0)
            ys.append(total)
    ax2.plot(xs, ys, color="tab:blue", linewidth=1.3, label="processed (incl. replays)")
    if produced:
        ax2.axhline(produced, color="tab:purple", linewidth=1, linestyle="-.", label=f"produced ({produced})")
