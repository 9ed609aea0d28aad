"""Partitioned grants through the real PostgreSQL log: stored, reloaded (snapshot + tail) and verified.

The decisions come from the domain (``process`` on MIG GPUs); their events are appended with the
fence, and the state PostgreSQL gives back must hold the same partitions (template, slots) without
choosing anything again; ``replay --verify`` agrees.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from events import decisions as ev
from events import intents as it
from events.values import AllocationSpec, GpuSpec, Resources
from services.allocator.adapters import database
from services.allocator.adapters.postgres import PostgresEventStore, PostgresLeaseStore
from services.allocator.domain import ClusterState, Scheduler, digest, process
from services.allocator.ports import DecidedIntent
from services.cli.main import app

pytestmark = pytest.mark.integration
NOW = datetime(2026, 3, 1, tzinfo=UTC)


def _intents() -> list[it.AnyIntent]:
    gpus = tuple(GpuSpec(name=f"n1-gpu{i}", model="A100_SXM_80G", index=i,
                         capacity=Resources(milli_tflops=700_000, vram_bytes=80 * 2**30)) for i in range(2))
    out: list[it.AnyIntent] = [it.RegisterNode(intent_id="reg", node="n1", pool="mig", gpus=gpus)]
    for n, template in enumerate(("3g.40gb", "2g.20gb", "", "1g.10gb", "7g.80gb", "4g.40gb")):
        request = Resources(milli_tflops=150_000 if not template else 0)
        spec = AllocationSpec(allocation_id=f"p{n}", namespace="ns", pod=f"p{n}", pool="mig", request=request,
                              limit=request, isolation="partitioned", partition_template=template)
        out.append(it.RequestAllocation(intent_id=f"req-{n}", spec=spec))
    # release some (a queued one too, so no row waits on the current-reason keeper, which is not running)
    out.extend(it.ReleaseAllocation(intent_id=f"rel-{uid}", allocation_id=uid) for uid in ("p1", "p4", "p5"))
    return out


async def _run(url: str) -> tuple[ClusterState, ClusterState, list[ev.AnyEvent]]:
    pool = await database.create_pool(url)
    try:
        lease = await PostgresLeaseStore(pool).acquire("allocator", holder="t", ttl_s=60, now=datetime.now(UTC))
        assert lease is not None
        state, store, scheduler, emitted = ClusterState.empty(), PostgresEventStore(pool), Scheduler(), []
        for i, intent in enumerate(_intents()):
            events = process(state, intent, NOW, scheduler)
            emitted.extend(events)
            stored = await store.append([DecidedIntent(intent_id=intent.intent_id, stream_seq=i + 1,
                                                       events=tuple(events))],
                                        lease="allocator", epoch=lease.epoch, state=state)
            state.position = stored[-1].position
            if i == 3:
                await store.save_snapshot(state)
        return state, await store.load_state(), emitted
    finally:
        await pool.close()


def test_partitions_survive_the_log_snapshot_and_verify(database_url: str) -> None:
    live, loaded, emitted = asyncio.run(_run(database_url))
    grants = [e for e in emitted if isinstance(e, ev.AllocationGranted)]
    assert all(len(g.partitions) == 1 for g in grants) and len(grants) >= 4
    assert digest(loaded) == digest(live)
    for name, gpu in live.gpus.items():
        assert loaded.gpus[name].partitions == gpu.partitions
    assert any(gpu.partitions for gpu in loaded.gpus.values())
    result = CliRunner().invoke(app, ["replay", "--verify", "--json", "--database-url", database_url])
    assert result.exit_code == 0 and json.loads(result.stdout)["ok"] is True, result.stdout
