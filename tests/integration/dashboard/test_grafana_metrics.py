"""The Grafana dashboard (deploy/grafana) queries only metrics a running allocator exports.

Every PromQL expression of the dashboard (panels and template variables) is scanned for
``gpuledger_*`` metric names; histogram and counter sample suffixes are folded into the family
name and compared with the families of a real allocator's ``/metrics`` (real NATS, in-memory
log). ``NOT_YET_EXPORTED`` lists the families the dashboard needs that the allocator does not
export yet, with who adds them: a listed family that appears fails the test too, so the list
cannot go stale.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from tests.integration.service.harness import start_reader, start_replica

ROOT = Path(__file__).resolve().parents[3] / "deploy/grafana"
DASHBOARD = ROOT / "dashboards/gpuledger.json"
DATASOURCES = ROOT / "provisioning/datasources/prometheus.yaml"

NOT_YET_EXPORTED: dict[str, str] = {}

_NAME = re.compile(r"\bgpuledger_[a-z0-9_]+\b")
_SUFFIX = re.compile(r"_(bucket|sum|count|total|created)$")


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def expressions(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard: panel targets and query variables."""
    exprs = [t["expr"] for p in _panels(dashboard["panels"]) for t in p.get("targets", [])]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            exprs.append(query["query"] if isinstance(query, dict) else query)
    return exprs


def families(expr: str) -> set[str]:
    """Metric family names an expression reads (``x_bucket``/``x_total`` -> ``x``)."""
    return {_SUFFIX.sub("", name) for name in _NAME.findall(expr)}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def test_name_parsing_folds_sample_suffixes() -> None:
    expr = ('histogram_quantile(0.5, sum by (le) (rate(gpuledger_decision_latency_seconds_bucket[5m]))) '
            '+ rate(gpuledger_decisions_total{type="x"}[1m]) / on() max(gpuledger_pool_queued)')
    assert families(expr) == {"gpuledger_decision_latency_seconds", "gpuledger_decisions", "gpuledger_pool_queued"}


def test_dashboard_is_well_formed(dashboard: dict[str, Any]) -> None:
    panels = list(_panels(dashboard["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    uid = yaml.safe_load(DATASOURCES.read_text())["datasources"][0]["uid"]
    for panel in panels:
        if panel["type"] != "row":
            assert panel["targets"], f"panel {panel['title']!r} queries nothing"
            assert panel["datasource"]["uid"] == uid, panel["title"]
    titles = " ".join(p["title"].lower() for p in panels)
    for topic in ("outcome", "decision latency", "queue wait", "tflops per pool", "vram per pool", "qos",
                  "epoch", "failover", "append", "relay"):
        assert topic in titles, f"no panel about {topic}"


async def test_every_queried_metric_is_exported_by_a_running_allocator(
        dashboard: dict[str, Any], nats_url: str) -> None:
    leases = InMemoryLeaseStore()
    store = InMemoryEventStore(leases)
    replica = await start_replica(nats_url, store=store, leases=leases)
    reader = await start_reader(nats_url, store=store, history=store)
    texts: list[str] = []
    try:
        async with aiohttp.ClientSession() as session:
            for port in (replica.port, reader.port):  # the writer's loop metrics, the reader's pool gauges
                async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                    assert response.status == 200
                    texts.append(await response.text())
    finally:
        await reader.stop()
        await replica.stop()
    exported = {family.name for text in texts for family in text_string_to_metric_families(text)}
    queried = set().union(*(families(e) for e in expressions(dashboard)))
    missing = sorted(queried - exported - set(NOT_YET_EXPORTED))
    assert not missing, f"the dashboard queries metrics the allocator does not export: {missing}"
    arrived = sorted(set(NOT_YET_EXPORTED) & exported)
    assert not arrived, f"now exported: remove from NOT_YET_EXPORTED: {arrived}"
    assert queried & exported, "the dashboard queries none of today's metrics"
