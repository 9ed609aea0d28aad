"""``trace replay`` end to end: a small slice of the openb trace through real NATS, a real
allocator replica and real PostgreSQL, with departures (releases), queueing and grants from the
queue; every pod ends in exactly one final state and ``replay --verify`` agrees on the digest."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from services.cli.main import app
from services.trace import openb
from services.trace.replay import replay_trace
from tests.integration.service.harness import start_replica, until

pytestmark = pytest.mark.integration


async def test_replay_of_a_small_slice(nats_url: str, database_url: str) -> None:
    replica = await start_replica(nats_url, database_url=database_url, snapshot_every=50)
    try:
        await until(lambda: replica.allocator.keeper.is_leader, what="leadership")
        nodes = openb.nodes()[:4]
        pods = openb.trace_pods()[:80]
        span = max(p.deleted or p.created or 0 for p in pods) - min(p.created or 0 for p in pods)
        report = await replay_trace(nodes, pods, nats_url=nats_url, database_url=database_url,
                                    speedup=span / 3, timeout_s=60)
        state = replica.allocator.state  # the replay removed its nodes again: its pool left the totals
        await until(lambda: "trace" not in state.pool_nodes and not state.nodes, what="the replay's nodes removed")
        assert not [a for a in state.allocations.values() if a.spec.pool == "trace"]
    finally:
        await replica.stop()
    assert report.problems == []
    assert report.verified
    assert report.decided == report.intents
    assert report.multiple_outcomes == 0
    assert report.removed_nodes == len(nodes)
    assert sum(report.final_states.values()) == len(pods)
    assert "none" not in report.final_states
    assert report.latency_ms["n"] == report.intents
    assert report.latency_ms["p50"] <= report.latency_ms["p99"]
    assert report.allocation_pct_over_time
    print(report.summary())
    args = ["replay", "--verify", "--database-url", database_url, "--json"]
    result = await asyncio.to_thread(CliRunner().invoke, app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["digest"] == report.digest
