"""Timeline analysis and the plot, on hand-made events (no processes)."""

from __future__ import annotations

from cr_consumer.drill.plot import plot_timeline
from cr_consumer.drill.report import analyse
from cr_consumer.drill.timeline import TimelineReader, TimelineWriter

T = 1000.0


def _events(controller: bool):
    ev = [{"t": T, "member": "m0", "ev": "start"}, {"t": T, "member": "m1", "ev": "start"}]
    for i in range(40):  # 100 records per member every 0.25 s for 10 s
        for m in ("m0", "m1"):
            ev.append({"t": T + 1 + i * 0.25, "member": m, "ev": "batch", "n": 100})
    ev.append({"t": T + 4.0, "member": "drill", "ev": "fault", "fault": "kill-member"})
    # member probes: reset attempt 2 at +4.5 (both members), attempt 3 at +6.0, resume at +6.2
    for m in ("m0", "m1"):
        ev.append({"t": T + 4.5, "member": m, "ev": "reset", "seq": 3, "attempt": 2})
        ev.append({"t": T + 6.0, "member": m, "ev": "reset", "seq": 3, "attempt": 3})
        ev.append({"t": T + 7.0, "member": m, "ev": "complete", "seq": 4})
    ev.append({"t": T + 6.2, "member": "m0", "ev": "resume"})
    if controller:
        ev += [
            {"t": T + 4.4, "member": "controller", "ev": "ctl_reset", "ctl": {"attempt": 2}},
            {"t": T + 4.6, "member": "controller", "ev": "ctl_resume", "ctl": {"attempt": 2}},
            {"t": T + 5.9, "member": "controller", "ev": "ctl_reset", "ctl": {"attempt": 3}},
            {"t": T + 6.1, "member": "controller", "ev": "ctl_resume", "ctl": {"attempt": 3}},
            {"t": T + 6.9, "member": "controller", "ev": "ctl_checkpoint", "ctl": {"seq": 4}},
            {"t": T + 5.0, "member": "controller", "ev": "ctl_join", "ctl": {"member": "m1"}},
            # after the drill started stopping: must not count
            {"t": T + 20.0, "member": "controller", "ev": "ctl_reset", "ctl": {"attempt": 4}},
        ]
    return ev


def test_analysis_from_member_probes():
    a = analyse(_events(controller=False), fault_time=T + 4.0, end_time=T + 15.0)
    assert a["times_from"] == "member probes"
    assert a["resets"] == 2
    assert a["checkpoints"] == 1
    assert a["time_to_detect_s"] == 0.5
    assert a["time_to_resume_s"] == 2.2
    assert a["time_to_recover_s"] == 3.0
    assert a["processed"] == 8000
    assert 700 < a["throughput_before"] < 900  # 800 records/s


def test_analysis_prefers_controller_events_and_ignores_shutdown():
    a = analyse(_events(controller=True), fault_time=T + 4.0, end_time=T + 15.0)
    assert a["times_from"] == "controller"
    assert a["resets"] == 2  # the reset at +20 s is after the drill started stopping
    assert a["time_to_detect_s"] == 0.4
    assert a["time_to_first_resume_s"] == 0.6
    assert a["time_to_resume_s"] == 2.1
    assert a["time_to_recover_s"] == 2.9


def test_timeline_round_trip_and_plot(tmp_path):
    w = TimelineWriter(tmp_path / "tl" / "m0-1.jsonl", "m0")
    for e in _events(controller=True):
        fields = {k: v for k, v in e.items() if k not in ("t", "member", "ev")}
        w.event(e["ev"], t=e["t"], member=e["member"], **fields)
    w.close()
    reader = TimelineReader(tmp_path / "tl")
    events = reader.all_events()
    assert len(events) == len(_events(controller=True))
    assert reader.poll() == []  # nothing new
    png = plot_timeline(events, tmp_path / "t.png", title="test", produced=8000)
    assert png.stat().st_size > 10_000
