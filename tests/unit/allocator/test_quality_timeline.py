"""The placement-quality series (services/allocator/dashboard/timeline.py) kept as the reader's
projection folds equals the whole-log fold the page used to run on its first visit, and the page
renders it without reading the log.

The log comes from the real domain (``process`` with a long-lived Scheduler) over the in-memory
event store; commit times are drawn (the store stamps "now", the wrapper below replaces it), so
sampling, thinning and stride doubling all happen. The reader starts from a snapshot part-way,
its follower and the start-up backfill run as concurrent tasks while the log grows.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import msgspec
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given, settings
from hypothesis import strategies as st

from events import decisions as ev
from services.allocator import domain
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.api.follower import Follower
from services.allocator.dashboard import auth, pages
from services.allocator.dashboard.timeline import QualityTimeline, Sample, sample_of
from services.allocator.domain.state import ClusterState
from services.allocator.ports import DecidedIntent, StoredEvent
from tests.unit.allocator.builders import T0, Cluster, Gi, a_gpu, a_request

TOKEN = "t0ken"


class TimedStore(InMemoryEventStore):
    """The in-memory store with drawn commit times (``times[position - 1]``) and a count of reads."""

    def __init__(self, times: list[datetime]) -> None:
        self.leases = InMemoryLeaseStore()
        super().__init__(self.leases)
        self.times = times
        self.reads = 0
        self.epoch = 0

    async def read(self, *, after: int = 0, limit: int | None = None) -> AsyncIterator[StoredEvent]:
        self.reads += 1
        async for stored in super().read(after=after, limit=limit):
            yield msgspec.structs.replace(stored, recorded_at=self.times[stored.position - 1])

    async def last_position(self) -> int:
        self.reads += 1
        return await super().last_position()

    async def add(self, events: list[ev.AnyEvent], state: ClusterState) -> None:
        if not self.epoch:
            lease = await self.leases.acquire("allocator", holder="t", ttl_s=600, now=T0)
            assert lease is not None
            self.epoch = lease.epoch
        first = await super().last_position()
        await self.append([DecidedIntent(intent_id=f"i{first + n}", stream_seq=first + n + 1, events=(event,))
                           for n, event in enumerate(events)], lease="allocator", epoch=self.epoch, state=state)


def whole_log_fold(events: list[StoredEvent], *, stride_s: float, max_points: int) -> list[Sample]:
    """The page's fold before the series was kept live: from position 1, on its first visit."""
    state, samples, last_at = ClusterState.empty(), list[Sample](), None
    for stored in events:
        if last_at is not None and (not samples or (stored.recorded_at - samples[-1].at).total_seconds() >= stride_s):
            samples.append(sample_of(state, last_at))
            if len(samples) >= max_points:
                samples, stride_s = samples[::2], stride_s * 2
        state = domain.evolve(state, stored.event)
        state.position = stored.position
        last_at = stored.recorded_at
    return samples if last_at is None else [*samples, sample_of(state, last_at)]


def _log(ops: list[tuple[int, int]]) -> Cluster:
    c = Cluster()
    c.node("n1", "p", a_gpu("n1-g0", 100, 16 * Gi), a_gpu("n1-g1", 100, 16 * Gi, model="H100"))
    c.node("n2", "p", a_gpu("n2-g0", 100, 16 * Gi))
    c.node("m1", "q", a_gpu("m1-g0", 50, 8 * Gi))
    live: list[str] = []
    for n, (kind, size) in enumerate(ops):
        if kind == 0 and live:
            c.release(live.pop(size % len(live)))
        else:
            c.request(a_request(f"r{n}", 10 * size, size * Gi, pool="q" if kind == 2 else "p"))
            live.append(f"r{n}")
    return c


ops_lists = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 8)), min_size=0, max_size=80)
gap_lists = st.lists(st.sampled_from([0.0, 0.1, 0.3, 0.5, 1.0, 2.5, 20.0]), min_size=1, max_size=16)


@settings(max_examples=25, deadline=None)
@given(ops=ops_lists, gaps=gap_lists, stride_s=st.sampled_from([0.2, 0.5, 1.0]), max_points=st.integers(4, 9),
       start=st.floats(0, 1), chunk=st.integers(1, 9))
def test_the_series_kept_as_the_reader_folds_equals_the_whole_log_fold(
        ops: list[tuple[int, int]], gaps: list[float], stride_s: float, max_points: int, start: float,
        chunk: int) -> None:
    _check_against_the_whole_log_fold(ops, gaps, stride_s, max_points, start, chunk)


def test_a_long_fixed_log_thins_the_series_and_still_equals_the_whole_log_fold() -> None:
    ops = [(n % 3, 1 + n % 7) for n in range(120)]
    timeline = _check_against_the_whole_log_fold(ops, [0.1, 0.3, 0.2], 0.2, 6, 0.4, 7)
    assert timeline.stride_s >= 0.2 * 2 ** 3  # thinned at least three times


def _check_against_the_whole_log_fold(ops: list[tuple[int, int]], gaps: list[float], stride_s: float,
                                      max_points: int, start: float, chunk: int) -> QualityTimeline:
    c = _log(ops)
    times = [T0 + timedelta(seconds=sum(gaps[i % len(gaps)] for i in range(n))) for n in range(len(c.events))]
    timeline = QualityTimeline(stride_s=stride_s, max_points=max_points)

    async def run() -> None:
        store = TimedStore(times)
        at_start = int(start * len(c.events))
        await store.add(c.events[:at_start], c.state)
        snapshot = ClusterState.empty()
        for stored in [s async for s in store.read()]:
            snapshot = domain.evolve(snapshot, stored.event)
            snapshot.position = stored.position
        await store.save_snapshot(snapshot)  # the reader starts from it: the backfill rebuilds before
        follower = Follower(store, poll_s=0.001)
        stop = asyncio.Event()
        following = asyncio.create_task(follower.run(stop))
        attaching = asyncio.create_task(timeline.attach(follower))
        for first in range(at_start, len(c.events), chunk):  # the log grows while both run
            await store.add(c.events[first:first + chunk], c.state)
            await asyncio.sleep(0)
        assert await follower.wait_for(len(c.events), timeout_s=10)
        await attaching
        stop.set()
        await following
        assert timeline.phase == "live" and timeline.note == ""
        assert timeline.position == follower.state.position == len(c.events)
        oracle = whole_log_fold([s async for s in store.read()], stride_s=stride_s, max_points=max_points)
        assert timeline.series(follower.state) == oracle
        assert len(timeline.samples) < max_points

    asyncio.run(run())
    return timeline


def test_a_log_longer_than_the_backfill_bound_starts_the_series_at_the_readers_start() -> None:
    c = _log([(1, 2), (2, 1), (1, 3), (0, 0), (1, 1), (2, 2), (0, 1)])
    times = [T0 + timedelta(seconds=10 * n) for n in range(len(c.events))]

    async def run() -> None:
        store = TimedStore(times)
        await store.add(c.events[:6], c.state)
        follower = Follower(store, poll_s=0.001)
        timeline = QualityTimeline(stride_s=1.0, max_points=100, max_backfill=5)
        stop = asyncio.Event()
        following = asyncio.create_task(follower.run(stop))
        await timeline.attach(follower)
        assert timeline.phase == "live" and "before log position 6" in timeline.note
        assert timeline.series(follower.state) == []  # nothing folded since the start: no "now" either
        await store.add(c.events[6:], c.state)
        assert await follower.wait_for(len(c.events), timeout_s=10)
        stop.set()
        await following
        series = timeline.series(follower.state)
        assert [s.position for s in series] == list(range(7, len(c.events) + 1))  # every 10 s one, then "now"
        assert series[-1] == sample_of(follower.state, times[-1])

    asyncio.run(run())


def test_a_failing_step_is_dropped_and_the_projection_goes_on() -> None:
    c = _log([(1, 2), (1, 3)])

    async def run() -> None:
        store = TimedStore([T0] * len(c.events))
        await store.add(c.events, c.state)
        follower = Follower(store)
        seen: list[int] = []

        def broken(state: ClusterState, stored: StoredEvent) -> None:
            raise RuntimeError("boom")

        follower.steps.extend([broken, lambda state, stored: seen.append(stored.position)])
        await follower.catch_up()
        assert follower.state.position == len(c.events)
        assert seen == list(range(1, len(c.events) + 1)) and broken not in follower.steps

    asyncio.run(run())


async def test_the_quality_page_renders_from_memory_without_reading_the_log() -> None:
    c = _log([(1, 2), (2, 1), (1, 3), (0, 0), (1, 1), (2, 5)])
    times = [T0 + timedelta(seconds=5 * n) for n in range(len(c.events))]
    store = TimedStore(times)
    await store.add(c.events[:4], c.state)
    await store.save_snapshot(await store.load_state())
    await store.add(c.events[4:], c.state)
    follower = Follower(store, poll_s=0.001)
    app = web.Application()
    sub = pages.build(follower, store, token=TOKEN)
    timeline = sub[pages.TIMELINE]
    app.add_subapp(auth.PREFIX, sub)
    stop = asyncio.Event()
    following = asyncio.create_task(follower.run(stop))
    async with TestClient(TestServer(app)) as client:
        await follower.loaded.wait()
        await sub[pages.BACKFILL]
        assert timeline.phase == "live" and timeline.position == len(c.events)
        stop.set()
        await following  # nothing else reads the log from here on
        store.reads = 0
        for _ in range(3):
            page = await client.get("/ui/quality", headers={"Authorization": f"Bearer {TOKEN}"})
            assert page.status == 200
            text = await page.text()
        assert store.reads == 0
        assert 'figure class="chart" data-pool="p"' in text and 'data-pool="q"' in text
        assert f"{len(c.events)} samples from" in text and f"1 to {len(c.events)})" in text
