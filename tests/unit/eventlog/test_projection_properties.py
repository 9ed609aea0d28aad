"""Property: the read models do not depend on how events were batched, and equal a rebuild from 0.

Random but consistent allocation lives (queue, grant, resize, release, reject, re-request of a
released id) are appended to the in-memory store in random batches.
"""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from events import decisions as ev
from events.values import Resources
from services.allocator.adapters import allocation_table
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.domain.state import ClusterState
from services.allocator.loop.snapshots import SnapshotPolicy
from services.allocator.ports import DecidedIntent, StoredEvent
from tests.contract import scenario

ACTIONS = st.lists(st.tuples(st.sampled_from(["request", "queue", "reject", "resize", "release", "dequeue"]),
                             st.integers(0, 5)), max_size=40)


def _events(actions: list[tuple[str, int]]) -> list[ev.AnyEvent]:
    out: list[ev.AnyEvent] = [scenario.node("n1", gpus=4)]
    status: dict[str, str] = {}
    for step, (action, i) in enumerate(actions):
        alloc, at = f"x{i}", scenario.T0 + timedelta(seconds=step + 1)
        spec = scenario.spec(alloc, namespace=f"ns{i % 2}", tflops=10_000)
        gpu = [f"n1-gpu{i % 4}"]
        current = status.get(alloc)
        if action in ("request", "queue", "reject") and current is None:
            if action == "request":
                out.append(ev.AllocationGranted(at=at, spec=spec, node="n1", gpus=tuple(gpu), charges=(spec.request,)))
                status[alloc] = "granted"
            elif action == "queue":
                out.append(ev.AllocationQueued(at=at, spec=spec, reason="full", code="capacity"))
                status[alloc] = "queued"
            else:
                out.append(ev.AllocationRejected(at=at, spec=spec, reason="no", code="invalid"))
        elif action == "dequeue" and current == "queued":
            out.append(ev.AllocationGranted(at=at, spec=spec, node="n1", gpus=tuple(gpu), charges=(spec.request,),
                                            from_queue=True))
            status[alloc] = "granted"
        elif action == "resize" and current == "granted":
            new = Resources(milli_tflops=5_000 + step, vram_bytes=scenario.GIB)
            out.append(ev.AllocationResized(at=at, allocation_id=alloc, namespace=spec.namespace, pool="default",
                                            request=new, limit=new, charges=(new,)))
        elif action == "release" and current is not None:
            out.append(ev.AllocationReleased(at=at, allocation_id=alloc, namespace=spec.namespace, pod=spec.pod,
                                             pool="default", node="n1" if current == "granted" else "",
                                             gpus=tuple(gpu) if current == "granted" else (),
                                             was_queued=current == "queued"))
            del status[alloc]
    return out


async def _append(events: list[ev.AnyEvent], cuts: list[int]) -> InMemoryEventStore:
    leases = InMemoryLeaseStore()
    store = InMemoryEventStore(leases)
    lease = await leases.acquire("allocator", holder="t", ttl_s=60, now=datetime.now(UTC))
    assert lease is not None
    bounds = sorted({0, len(events), *(c % (len(events) + 1) for c in cuts)})
    state = ClusterState.empty()
    for n, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        batch = [DecidedIntent(intent_id=f"i{n}-{k}", stream_seq=0, events=(e,)) for k, e in enumerate(events[lo:hi])]
        state = scenario.fold_batch(state, batch)
        await store.append(batch, lease="allocator", epoch=lease.epoch, state=state)
    return store


@settings(max_examples=60, deadline=None)
@given(actions=ACTIONS, cuts=st.lists(st.integers(0, 100), max_size=8))
def test_read_models_equal_a_rebuild_however_the_log_was_batched(actions: list[tuple[str, int]],
                                                                  cuts: list[int]) -> None:
    events = _events(actions)
    store = asyncio.run(_append(events, cuts))
    one_batch = asyncio.run(_append(events, []))
    models = asyncio.run(store.read_models())
    assert models == asyncio.run(one_batch.read_models())
    rebuilt = allocation_table.project_all(asyncio.run(_all(store)))
    assert models.allocations == rebuilt.sorted_rows()
    open_ids = [r["allocation_id"] for r in models.allocations if r["status"] in ("queued", "granted")]
    assert len(open_ids) == len(set(open_ids))
    lives = sum(isinstance(e, ev.AllocationQueued | ev.AllocationRejected)
                or (isinstance(e, ev.AllocationGranted) and not e.from_queue) for e in events)
    assert len(models.allocations) == lives


async def _all(store: InMemoryEventStore) -> list[StoredEvent]:
    return [s async for s in store.read()]


def test_snapshot_policy_is_due_every_n_events_and_never_at_zero() -> None:
    policy = SnapshotPolicy(every=100, last=50)
    assert not policy.due(149) and policy.due(150)
    policy.saved(150)
    assert not policy.due(200)
    assert not SnapshotPolicy(every=0).due(10**9)
