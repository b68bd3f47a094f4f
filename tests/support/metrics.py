"""Helpers of the metrics tests: scrape, check with promtool, metric names of an
exposition and of the Grafana dashboard's queries."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from support.paths import EXAMPLES

DASHBOARD = EXAMPLES / "grafana-dashboard.json"
#: Bound on one scrape and on one promtool run.
SCRAPE_TIMEOUT_S = 10.0
PROMTOOL_TIMEOUT_S = 30.0


def scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=SCRAPE_TIMEOUT_S) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain")
        return reply.read().decode()


def promtool_problems(text: str) -> str:
    """What ``promtool check metrics`` says about ``text`` (empty: nothing), with its exit code."""
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is not installed: run `make promtool` (Debian package prometheus)"
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=PROMTOOL_TIMEOUT_S
    )
    said = (done.stdout + done.stderr).strip()
    return said if done.returncode == 0 else f"exit {done.returncode}: {said}"


def exposed_names(text: str) -> set[str]:
    """Every series name a query can use against ``text`` (also those of families without samples yet)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names.update(family.name + suffix for suffix in ("_bucket", "_sum", "_count"))
    return names


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples if s.name == name
    ]


def dashboard_metric_names() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    names: set[str] = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            names.update(re.findall(r"\b(crkafka_[a-z0-9_]+)", target["expr"]))
    return names
