"""The reader's projection (api/follower.py) equals the writer's at the same log position.

The writer here is the real decision path (``domain.process`` with a long-lived Scheduler, as the
allocator binds it) appending to the in-memory event store; the follower folds the log by position,
from a snapshot when one was saved. Hypothesis draws the intents, the batching, where snapshots fall
and when the reader catches up.
"""

from __future__ import annotations

import asyncio
import functools
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from events import intents
from services.allocator import domain
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.api.follower import SLICE_EVENTS, Follower
from services.allocator.domain.state import ClusterState, digest
from services.allocator.ports import DecidedIntent
from tests.integration.service.factory import register_node, request

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)


def _intent(i: int, kind: int, size: int) -> intents.AnyIntent:
    if kind == 0:
        return request(f"a{i}", tflops=10 * size, namespace=f"ns{size % 2}")
    if kind == 1:
        return intents.ReleaseAllocation(intent_id=f"rel-{i}", allocation_id=f"a{max(0, i - size)}", reason="done")
    return register_node(f"late{i}", gpus=1 + size % 3)


intent_lists = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 9)), min_size=1, max_size=60)


class Writer:
    """The decision path over an in-memory store: decide, append per batch, optionally snapshot."""

    def __init__(self) -> None:
        self.leases = InMemoryLeaseStore()
        self.store = InMemoryEventStore(self.leases)
        self.state = ClusterState.empty()
        self.process = functools.partial(domain.process, scheduler=domain.Scheduler())
        self.digests: dict[int, str] = {0: digest(self.state)}

    async def start(self) -> int:
        lease = await self.leases.acquire("allocator", holder="w", ttl_s=60, now=T0)
        assert lease is not None
        return int(lease.epoch)

    async def commit(self, epoch: int, batch: list[intents.AnyIntent], now: datetime) -> None:
        decided = [DecidedIntent(intent_id=i.intent_id, stream_seq=0, events=tuple(self.process(self.state, i, now)))
                   for i in batch]
        stored = await self.store.append(decided, lease="allocator", epoch=epoch, state=self.state)
        if stored:
            self.state.position = stored[-1].position
            self.digests[self.state.position] = digest(self.state)


@settings(max_examples=40, deadline=None)
@given(steps=intent_lists, batch=st.integers(1, 7), snapshot_after=st.integers(0, 12),
       catch_up_every=st.integers(1, 5))
def test_the_readers_projection_equals_the_writers_at_every_position_it_stops_at(
        steps: list[tuple[int, int]], batch: int, snapshot_after: int, catch_up_every: int) -> None:
    async def run() -> None:
        writer = Writer()
        epoch = await writer.start()
        await writer.commit(epoch, [register_node("n1", gpus=2), register_node("n2", gpus=4, tflops=50)], T0)
        chunks = [steps[i:i + batch] for i in range(0, len(steps), batch)]
        follower = Follower(writer.store)
        for n, chunk in enumerate(chunks):
            if n == snapshot_after:
                await writer.store.save_snapshot(writer.state)
                follower = Follower(writer.store)  # a reader started now resumes from the snapshot
                follower.state = await writer.store.load_state()
            items = [_intent(n * batch + j, kind, size) for j, (kind, size) in enumerate(chunk)]
            await writer.commit(epoch, items, T0 + timedelta(minutes=n + 1))
            if n % catch_up_every == 0:
                await follower.catch_up()
                assert follower.lag == 0
                assert digest(follower.state) == writer.digests[follower.state.position]
        await follower.catch_up()
        assert follower.state.position == writer.state.position == await writer.store.last_position()
        assert digest(follower.state) == digest(writer.state)

    asyncio.run(run())


def test_a_long_log_is_folded_in_slices_and_each_slice_reaches_the_listeners() -> None:
    async def run() -> None:
        writer = Writer()
        epoch = await writer.start()
        await writer.commit(epoch, [register_node("n1", gpus=1)], T0)
        releases = [intents.ReleaseAllocation(intent_id=f"r{i}", allocation_id=f"none{i}", reason="x")
                    for i in range(SLICE_EVENTS + 10)]
        await writer.commit(epoch, releases, T0)  # each is a rejected release: one event each
        follower = Follower(writer.store)
        seen: list[int] = []
        follower.listeners.append(lambda stored: seen.append(len(stored)))
        assert await follower.catch_up() == writer.state.position
        assert seen == [SLICE_EVENTS, writer.state.position - SLICE_EVENTS]
        assert digest(follower.state) == digest(writer.state)

    asyncio.run(run())


def test_wait_for_returns_once_the_position_is_applied_and_false_after_its_timeout() -> None:
    async def run() -> None:
        writer = Writer()
        epoch = await writer.start()
        follower = Follower(writer.store, poll_s=0.01)
        stop = asyncio.Event()
        task = asyncio.create_task(follower.run(stop))
        await follower.loaded.wait()
        assert not await follower.wait_for(1, timeout_s=0.05)
        await writer.commit(epoch, [register_node("n1")], T0)
        assert await follower.wait_for(1, timeout_s=5)
        assert follower.state.position == 1 and follower.head == 1
        stop.set()
        await task

    asyncio.run(run())
