"""The append's keyed UPDATEs run as index lookups whatever the table statistics say.

``allocations`` grows by hundreds of rows per append, so its statistics are usually stale. Here
it is analyzed when 1 % of its 1,000 lives are open, then 3,000 open lives are added: the planner
believes ~40 rows are open. The patch statement must still reach each open life through
``ix_allocations_open`` and the primary key (a join on the open rows would hash or loop over
all 3,000 of them: seen at 9 ms and 290 ms for 256 patches), and the ``gpus`` update must use its
primary key under the append's planner settings. How an ended allocation went (the API's 404 body,
``gpuledger why``) is looked up through ``ix_allocations_lives``, not by reading every life.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import asyncpg
import msgspec
import pytest

from events import decisions as ev
from events.values import AllocationSpec, Resources
from services.allocator.adapters import pg_lives, pg_projection
from services.allocator.adapters.postgres import PostgresEventStore, PostgresLeaseStore
from services.allocator.domain import evolve
from services.allocator.domain.state import ClusterState
from services.allocator.ports import DecidedIntent
from tests.contract import scenario

pytestmark = pytest.mark.integration
NOW = datetime(2026, 3, 1, tzinfo=UTC)
REQUEST = Resources(milli_tflops=1_000, vram_bytes=1 << 20)
INTENT_IDS = itertools.count()


def _grant(n: int) -> ev.AllocationGranted:
    spec = AllocationSpec(allocation_id=f"a{n}", namespace=f"ns-{n % 7}", pod=f"pod-{n}", pool="default",
                          request=REQUEST, limit=REQUEST)
    gpu = f"n{n % 10}-gpu{n % 8}"
    return ev.AllocationGranted(at=NOW + timedelta(seconds=n), spec=spec, node=f"n{n % 10}", gpus=(gpu,),
                                charges=(REQUEST,))


def _release(state: ClusterState, n: int) -> ev.AllocationReleased:
    live = state.allocations[f"a{n}"]
    return ev.AllocationReleased(at=NOW + timedelta(hours=1), allocation_id=f"a{n}", namespace=live.spec.namespace,
                                 pod=live.spec.pod, pool="default", node=live.node, gpus=tuple(live.gpus))


async def _append(store: PostgresEventStore, epoch: int, state: ClusterState,
                  events: list[ev.AnyEvent]) -> ClusterState:
    for event in events:
        state = evolve(state, event)
    batch = [DecidedIntent(intent_id=f"i{next(INTENT_IDS)}", stream_seq=0, events=(e,)) for e in events]
    await store.append(batch, lease="allocator", epoch=epoch, state=state)
    return state


async def _plan(conn: asyncpg.Connection, sql: str, *args: object) -> str:
    async with conn.transaction():
        await conn.execute(pg_projection.PLAN_SETTINGS)
        rows = await conn.fetch("EXPLAIN " + sql, *args)
    return "\n".join(r[0] for r in rows)


async def test_patch_and_gpu_updates_use_indexes_on_a_grown_table_with_stale_statistics(database_url: str) -> None:
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        lease = await PostgresLeaseStore(pool).acquire("allocator", holder="t", ttl_s=60, now=NOW)
        assert lease is not None
        store = PostgresEventStore(pool)
        state = await _append(store, lease.epoch, ClusterState.empty(),
                              [scenario.node(f"n{i}", gpus=8) for i in range(10)])
        state = await _append(store, lease.epoch, state, [_grant(n) for n in range(1000)])
        state = await _append(store, lease.epoch, state, [_release(state, n) for n in range(10, 1000)])
        await pool.execute("ANALYZE allocations; ANALYZE gpus")
        for first in range(1000, 4000, 500):
            state = await _append(store, lease.epoch, state, [_grant(n) for n in range(first, first + 500)])
        patches = msgspec.json.encode([{"allocation_id": f"a{n}", "status": "released"} for n in range(1000, 4000, 10)])
        names = msgspec.json.encode([{"name": f"n{i}-gpu{j}"} for i in range(10) for j in range(8)])
        async with pool.acquire() as conn:
            patch_plan = await _plan(conn, pg_projection.PATCH_ALLOCATIONS, patches.decode())
            gpu_plan = await _plan(conn, pg_projection.UPDATE_GPUS, names.decode())
            ended_plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + pg_lives.LIVES, "a17"))
    finally:
        await pool.close()
    assert "Index Scan using ix_allocations_open" in patch_plan, patch_plan
    assert "Index Cond: (allocation_id = u.allocation_id)" in patch_plan, patch_plan
    for whole_table in ("Seq Scan on allocations", "Hash", "Materialize", "Join Filter"):
        assert whole_table not in patch_plan, patch_plan
    assert "Index Scan using gpus_pkey" in gpu_plan and "Seq Scan" not in gpu_plan, gpu_plan
    # an ended life (a17 was released) is found through its index, not by reading every life
    assert "ix_allocations_lives" in ended_plan and "Seq Scan" not in ended_plan, ended_plan
