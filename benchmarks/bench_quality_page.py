"""Placement-quality page (``/ui/quality``): server time of a visit on a log of ``--events`` events.

A durable PostgreSQL from the wheel (fsync on), the openb inventory (1,213 nodes, 6,212 GPUs) and
the openb pods requested through the domain's ``process`` (with a release of an earlier pod after
every third request) appended 256 intents per transaction until the log holds ``--events`` events.
A reader's projection (``Follower``) and the dashboard run in this process; the page is fetched
over HTTP (aiohttp's test server on a free loopback port) with the dashboard token, the reader's
polling stopped so that every read of the log counted is the page's. Prints: the first visit after
the reader loaded (before issue 27 this folded the whole log from position 1), the
median of ``--repeat`` later visits, the log reads during those visits (the events table), and, for
the code that keeps the series live, how long its start-up backfill took and a visit with the
series filled to its 2,000-point bound.

The same file runs against older code: copy it out of the tree and run it with ``PYTHONPATH`` set
to that checkout (it only uses ``pages.build``, ``pages.TIMELINE`` and ``Follower``, which both have).

Usage: ``python3 benchmarks/bench_quality_page.py [--events 10000] [--repeat 5]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from benchmarks import openb
from events import intents as it
from services.allocator.adapters import database
from services.allocator.adapters.postgres import PostgresEventStore, PostgresLeaseStore
from services.allocator.api.follower import Follower
from services.allocator.dashboard import pages
from services.allocator.domain import Scheduler, process
from services.allocator.domain.state import ClusterState
from services.allocator.ports import DecidedIntent, StoredEvent
from services.shared.pgserver import PgServer

TOKEN = "bench-token"


class CountingStore(PostgresEventStore):
    """The PostgreSQL event store, counting reads of the events table (``read``, ``last_position``)."""

    reads = 0

    async def read(self, *, after: int = 0, limit: int | None = None) -> AsyncIterator[StoredEvent]:
        self.reads += 1
        async for stored in super().read(after=after, limit=limit):
            yield stored

    async def last_position(self) -> int:
        self.reads += 1
        return await super().last_position()


def intents(events: int) -> list[it.AnyIntent]:
    """The openb nodes, then openb pods requested with a release of an earlier one after every third."""
    out: list[it.AnyIntent] = list(openb.nodes())
    pods = openb.pods()
    for n in range(events):
        spec = pods[n % len(pods)]
        name = f"q-{n}"
        out.append(it.RequestAllocation(intent_id=f"req-{n}", spec=msgspec.structs.replace(
            spec, allocation_id=name, pod=name)))
        if n % 3 == 2:
            out.append(it.ReleaseAllocation(intent_id=f"rel-{n}", allocation_id=f"q-{n - 2}",
                                            namespace=spec.namespace, pool=spec.pool))
    return out


async def build_log(db_url: str, target: int) -> int:
    pool = await database.create_pool(db_url)
    try:
        store, leases = PostgresEventStore(pool), PostgresLeaseStore(pool)
        lease = await leases.acquire("allocator", holder="bench", ttl_s=3600, now=datetime.now(UTC))
        assert lease is not None
        state, scheduler = ClusterState.empty(), Scheduler()
        pending: list[DecidedIntent] = []
        written = 0
        for n, intent in enumerate(intents(target)):
            events = tuple(process(state, intent, datetime.now(UTC), scheduler))
            pending.append(DecidedIntent(intent_id=intent.intent_id, stream_seq=n + 1, events=events))
            written += len(events)
            if len(pending) == 256 or written >= target:
                stored = await store.append(pending, lease="allocator", epoch=lease.epoch, state=state)
                state.position = stored[-1].position
                pending = []
            if written >= target:
                break
        return state.position
    finally:
        await pool.close()


async def run(args: argparse.Namespace, root: Path) -> None:
    pg = PgServer(root / "pg").start()
    try:
        db_url = pg.create_database("bench")
        database.upgrade(db_url)
        started = time.perf_counter()
        position = await build_log(db_url, args.events)
        print(f"log: {position:,} events (openb nodes, requests and releases) in {time.perf_counter() - started:.1f} s")
        await visit(db_url, args.repeat)
    finally:
        pg.stop()


async def visit(db_url: str, repeat: int) -> None:
    pool = await database.create_pool(db_url)
    store = CountingStore(pool)
    follower = Follower(store)
    app = web.Application()
    sub = pages.build(follower, store, token=TOKEN)
    app.add_subapp("/ui", sub)
    stop = asyncio.Event()
    following = asyncio.create_task(follower.run(stop))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    try:
        async with TestClient(TestServer(app)) as client:
            await follower.loaded.wait()
            timeline = sub[pages.TIMELINE]
            loaded = time.perf_counter()
            while getattr(timeline, "phase", "live") != "live":
                await asyncio.sleep(0.01)
            if hasattr(timeline, "phase"):
                print(f"start-up backfill of the quality series: {time.perf_counter() - loaded:.2f} s "
                      f"(in the background, in slices; the reader answers meanwhile)")
            stop.set()
            await following  # the reader stops polling: every read counted below is the page's
            store.reads = 0
            times, html = [], ""
            for _ in range(repeat + 1):
                started = time.perf_counter()
                page = await client.get("/ui/quality", headers=headers)
                html = await page.text()
                assert page.status == 200, html[:300]
                times.append(1000 * (time.perf_counter() - started))
            print(f"first visit: {times[0]:.1f} ms; later visits: median {statistics.median(times[1:]):.1f} ms "
                  f"({len(html):,} bytes); event-log reads during the {repeat + 1} visits: {store.reads}")
            if hasattr(timeline, "series"):
                await full_series(client, timeline, follower, headers, repeat)
    finally:
        stop.set()
        await following
        await pool.close()


async def full_series(client: TestClient[web.Request, web.Application], timeline: object, follower: Follower,
                      headers: dict[str, str], repeat: int) -> None:
    """A visit with the series at its bound (the last real sample repeated at distinct positions)."""
    series = timeline.series(follower.state)  # type: ignore[attr-defined]
    if not series:
        return
    last = series[-1]
    bound = timeline.max_points - 1  # type: ignore[attr-defined]
    timeline.samples = [msgspec.structs.replace(last, position=n) for n in range(bound)]  # type: ignore[attr-defined]
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        page = await client.get("/ui/quality", headers=headers)
        html = await page.text()
        times.append(1000 * (time.perf_counter() - started))
    print(f"series at its bound ({bound:,} samples + now): median {statistics.median(times):.1f} ms "
          f"({len(html):,} bytes)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000, help="events in the log (>= 2,000)")
    parser.add_argument("--repeat", type=int, default=5, help="later visits timed")
    args = parser.parse_args()
    if args.events < 2000 or args.repeat < 1:
        parser.error("--events must be >= 2000 and --repeat >= 1")
    with tempfile.TemporaryDirectory(prefix="gpuledger-quality-") as root:
        asyncio.run(run(args, Path(root)))


if __name__ == "__main__":
    main()
