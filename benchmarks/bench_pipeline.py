"""End-to-end pipeline benchmark: publish -> decide -> commit -> ack -> event published.

Runs a real nats-server and a durable PostgreSQL (fsync on) from the wheels, the allocator as its
own process (``python -m services.allocator``), the openb inventory (1,213 nodes, 6,212 GPUs) and
the openb pods as RequestAllocation intents. Measures: sustained durable decisions/s (all pods
published at once), p50/p99 intent-to-event latency at offered loads, and failover time (leader
killed with SIGKILL -> first outcome event decided by the standby), then checks that every intent
has exactly one outcome.

``--saturated`` measures the pipeline when the cluster is full (issue 27): the pool is filled with
the openb pods (cycled, renamed) until ``--waiting`` requests are queued, then a stream alternating
one ReleaseAllocation (of the oldest granted allocation) and one new RequestAllocation is offered:
``--stream`` intents all at once (durable decisions/s at the maximum rate), then at each ``--rates``
value for ``--seconds`` (intent -> outcome latency p50/p99), then ``--stream`` at once again. Each
release drains the queue (the freed room is granted to waiting requests), each new request mostly
queues, so the queue stays about ``--waiting`` long. The writer runs alone (no reader process).

Usage: ``python3 benchmarks/bench_pipeline.py [--rates 100,500,1000] [--seconds 5]``,
``python3 benchmarks/bench_pipeline.py --saturated [--waiting 5000] [--stream 2000] [--rates 200] [--scale 1]``
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import openb
from events import codec, intents
from events.decisions import AllocationGranted, AllocationPreempted, AllocationReleased
from events.values import AllocationSpec
from services.allocator.adapters import database
from services.allocator.adapters.relay import INTENT_HEADER
from services.allocator.api.views import OUTCOME_TYPES
from services.shared import messaging
from services.shared.natsserver import NatsServer, free_port
from services.shared.pgserver import PgServer


class Watch:
    """Records when each intent's first event (its outcome) arrives on GPULEDGER_EVENTS."""

    def __init__(self) -> None:
        self.sent: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.tags: dict[str, list[str]] = {}
        """Intent id -> the tags of its events (``allocation_granted``, ``allocation_queued``, ...)."""
        self.live: dict[str, tuple[str, str]] | None = None
        """Granted allocations (id -> namespace, pool), oldest first; kept only when not None."""
        self.events = 0

    async def on_event(self, msg: object) -> None:
        headers = getattr(msg, "headers", None) or {}
        intent_id = headers.get(INTENT_HEADER, "")
        self.events += 1
        if intent_id in self.sent:
            self.tags.setdefault(intent_id, []).append(str(getattr(msg, "subject", "")).rsplit(".", 1)[-1])
            if intent_id not in self.done:
                self.done[intent_id] = time.perf_counter()
        if self.live is not None:
            event = codec.decode_event(getattr(msg, "data", b""))
            if isinstance(event, AllocationGranted):
                self.live[event.spec.allocation_id] = (event.spec.namespace, event.spec.pool)
            elif isinstance(event, AllocationReleased | AllocationPreempted):
                self.live.pop(event.allocation_id, None)

    async def wait_all(self, ids: list[str], timeout_s: float = 300) -> None:
        deadline = time.perf_counter() + timeout_s
        pending = [i for i in ids if i not in self.done]
        while pending:
            pending = [i for i in pending if i not in self.done]
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{len(pending)} intents without an outcome after {timeout_s}s")
            await asyncio.sleep(0.01)


def spawn(name: str, nats_url: str, db_url: str, log_dir: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "GPULEDGER_NATS_URL": nats_url, "GPULEDGER_DATABASE_URL": db_url,
           "GPULEDGER_HOLDER": name, "GPULEDGER_HTTP_PORT": str(free_port()), "GPULEDGER_HEARTBEAT_CHECK_S": "0",
           "GPULEDGER_LOG_LEVEL": "warning"}
    out = (log_dir / f"{name}.log").open("ab")
    return subprocess.Popen([sys.executable, "-m", "services.allocator"], env=env, stdout=out, stderr=out)


@functools.cache
def _pods() -> list[AllocationSpec]:
    return openb.pods()


def requests(prefix: str, count: int, first: int = 0) -> list[intents.RequestAllocation]:
    pods = _pods()
    return [intents.RequestAllocation(intent_id=f"{prefix}-{i}", spec=_renamed(pods[i % len(pods)], f"{prefix}-{i}"))
            for i in range(first, first + count)]


def _renamed(spec: AllocationSpec, name: str) -> AllocationSpec:
    return msgspec.structs.replace(spec, allocation_id=name, pod=name)


def releases(batch: list[intents.RequestAllocation]) -> list[intents.ReleaseAllocation]:
    return [intents.ReleaseAllocation(intent_id=f"rel-{r.intent_id}", allocation_id=r.spec.allocation_id,
                                      namespace=r.spec.namespace, pool=r.spec.pool) for r in batch]


async def publish_paced(js: object, batch: list[intents.AnyIntent], rate: float, watch: Watch) -> None:
    start = time.perf_counter()
    for n, intent in enumerate(batch):
        delay = start + n / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        watch.sent[intent.intent_id] = time.perf_counter()
        await messaging.publish_intent(js, intent)  # type: ignore[arg-type]


async def publish_burst(js: object, batch: list[intents.AnyIntent], watch: Watch) -> None:
    futures = []
    for intent in batch:
        watch.sent[intent.intent_id] = time.perf_counter()
        futures.append(await js.publish_async(  # type: ignore[attr-defined]
            f"gpuledger.intent.{codec.tag_of(intent)}", codec.encode(intent),
            headers={"Nats-Msg-Id": intent.intent_id}))
    await asyncio.gather(*futures)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(args: argparse.Namespace, root: Path) -> None:
    nats_server = NatsServer(root / "nats")
    nats_server.start()
    pg = PgServer(root / "pg").start()
    db_url = pg.create_database("bench")
    database.upgrade(db_url)
    procs = [spawn("a", nats_server.url, db_url, root)]
    if args.saturated:
        try:
            await run_saturated(args, nats_server.url, db_url)
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
            pg.stop()
            nats_server.stop()
        return
    client = await messaging.connect(nats_server.url)
    js = client.jetstream()
    await messaging.ensure_streams(js)
    watch = Watch()
    await client.subscribe("gpuledger.event.>", cb=watch.on_event)
    try:
        nodes = openb.nodes()
        for node in nodes:
            await messaging.publish_intent(js, node)
        warm = requests("warm", 50)
        await publish_burst(js, list(warm), watch)
        await watch.wait_all([w.intent_id for w in warm])
        print(f"inventory: {len(nodes)} nodes; allocator warm")
        await throughput(js, watch, args.burst)
        for rate in args.rates:
            await latency(js, watch, rate, args.seconds)
        procs.append(spawn("b", nats_server.url, db_url, root))
        await asyncio.sleep(3)
        await failover(js, watch, procs, db_url)
    finally:
        await client.close()
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
        pg.stop()
        nats_server.stop()


async def throughput(js: object, watch: Watch, count: int) -> None:
    batch = requests("burst", count)
    started = time.perf_counter()
    await publish_burst(js, list(batch), watch)
    await watch.wait_all([r.intent_id for r in batch])
    elapsed = max(watch.done[r.intent_id] for r in batch) - started
    print(f"sustained: {count} RequestAllocation in {elapsed:.2f} s = {count / elapsed:,.0f} decisions/s "
          f"(publish -> decide -> commit -> ack -> event received)")
    rel = releases(batch)
    await publish_burst(js, list(rel), watch)
    await watch.wait_all([r.intent_id for r in rel])


async def latency(js: object, watch: Watch, rate: int, seconds: float) -> None:
    batch = requests(f"r{rate}", int(rate * seconds))
    await publish_paced(js, list(batch), rate, watch)
    await watch.wait_all([r.intent_id for r in batch])
    lat = [(watch.done[r.intent_id] - watch.sent[r.intent_id]) * 1000 for r in batch]
    print(f"offered {rate}/s for {seconds:.0f} s ({len(batch)} intents): p50 {percentile(lat, 0.5):.1f} ms, "
          f"p99 {percentile(lat, 0.99):.1f} ms, max {max(lat):.1f} ms")
    rel = releases(batch)
    await publish_burst(js, list(rel), watch)
    await watch.wait_all([r.intent_id for r in rel])


async def failover(js: object, watch: Watch, procs: list[subprocess.Popen[bytes]], db_url: str) -> None:
    batch = requests("fo", 3000)
    publisher = asyncio.create_task(publish_paced(js, list(batch), 500, watch))
    await asyncio.sleep(2)
    procs[0].send_signal(signal.SIGKILL)
    killed, killed_at = time.perf_counter(), time.time()
    procs[0].wait()
    await publisher
    await watch.wait_all([r.intent_id for r in batch])
    pool = await database.create_pool(db_url)
    try:
        # The standby's first commit (its epoch is the newest): events relayed after the kill may
        # still be the killed leader's, so the first event received after the kill does not tell.
        first = await pool.fetchval("SELECT extract(epoch FROM min(recorded_at)) FROM events "
                                    "WHERE epoch = (SELECT max(epoch) FROM events)")
        after = sorted(t for t in watch.done.values() if t > killed)
        print(f"failover: leader SIGKILLed -> first event committed by the standby after "
              f"{float(first) - killed_at:.2f} s (first outcome event received after the kill: "
              f"{after[0] - killed:.2f} s)")
        rows = await pool.fetch("SELECT intent_id, count(*) FROM events WHERE type = any($1::text[]) "
                                "AND data->>'from_queue' IS NULL GROUP BY intent_id", list(OUTCOME_TYPES))
    finally:
        await pool.close()
    counts = {r[0]: r[1] for r in rows}
    lost = sum(1 for r in batch if counts.get(r.intent_id, 0) == 0)
    doubled = sum(1 for c in counts.values() if c > 1)
    print(f"failover: {len(batch)} intents at 500/s across the kill: {lost} lost, {doubled} decided twice")


async def run_saturated(args: argparse.Namespace, nats_url: str, db_url: str) -> None:
    """Fill the pool until ``args.waiting`` requests wait, then offer the release/request stream."""
    client = await messaging.connect(nats_url)
    js = client.jetstream()
    await messaging.ensure_streams(js)
    watch = Watch()
    watch.live = {}
    await client.subscribe("gpuledger.event.>", cb=watch.on_event)
    try:
        nodes = openb.nodes(replicas=args.scale)
        for node in nodes:
            await messaging.publish_intent(js, node)
        gpus = sum(len(n.gpus) for n in nodes)
        started = time.perf_counter()
        waiting, made = await fill(js, watch, args.waiting)
        print(f"saturated: {len(nodes)} nodes, {gpus} GPUs (scale {args.scale}); filled with {made} requests in "
              f"{time.perf_counter() - started:.1f} s: {len(watch.live)} granted, {waiting} waiting")
        stream = Stream(watch, made)
        await asyncio.sleep(args.settle)
        await max_rate(js, watch, stream, args, "maximum rate")
        for rate in args.rates:
            started = time.perf_counter()
            batch = await stream.publish_paced(js, rate, int(rate * args.seconds))
            offered = len(batch) / (time.perf_counter() - started)
            await watch.wait_all([i.intent_id for i in batch], timeout_s=args.timeout)
            lat = [(watch.done[i.intent_id] - watch.sent[i.intent_id]) * 1000 for i in batch]
            print(f"saturated, offered {rate}/s for {args.seconds:.0f} s ({len(batch)} intents, published at "
                  f"{offered:,.0f}/s): intent -> outcome "
                  f"p50 {percentile(lat, 0.5):.1f} ms, p99 {percentile(lat, 0.99):.1f} ms, max {max(lat):.1f} ms "
                  f"(events: {_tally(watch, batch)})")
        await max_rate(js, watch, stream, args, "maximum rate again")
        pool = await database.create_pool(db_url)
        try:
            left = await pool.fetchval("SELECT count(*) FROM allocations WHERE status = 'queued'")
        finally:
            await pool.close()
        print(f"saturated: {left} requests waiting at the end")
    finally:
        await client.close()


async def max_rate(js: object, watch: Watch, stream: Stream, args: argparse.Namespace, label: str) -> None:
    """Offer ``args.stream`` intents of the stream at once; print durable decisions/s."""
    batch = [stream.next() for _ in range(args.stream)]
    started = time.perf_counter()
    events_before = watch.events
    await publish_burst(js, batch, watch)
    await watch.wait_all([i.intent_id for i in batch], timeout_s=args.timeout)
    elapsed = max(watch.done[i.intent_id] for i in batch) - started
    print(f"saturated, {label}: {len(batch)} intents (release / request alternating) in {elapsed:.2f} s = "
          f"{len(batch) / elapsed:,.0f} durable decisions/s ({watch.events - events_before} events: "
          f"{_tally(watch, batch)})", flush=True)


async def fill(js: object, watch: Watch, waiting: int) -> tuple[int, int]:
    """Publish openb requests in bursts until ``waiting`` of them are queued; returns the number
    queued and the number published."""
    queued = made = 0
    while queued < waiting:
        size = 2000 if queued == 0 else max(100, waiting - queued)
        batch = requests("fill", size, first=made)
        made += size
        await publish_burst(js, list(batch), watch)
        await watch.wait_all([r.intent_id for r in batch], timeout_s=900)
        queued += sum(1 for r in batch if "allocation_queued" in watch.tags[r.intent_id])
    return queued, made


class Stream:
    """The saturated stream: release the oldest granted allocation, then a new request, alternately."""

    def __init__(self, watch: Watch, made: int) -> None:
        self.watch = watch
        self.made = made
        self.count = 0

    def next(self) -> intents.AnyIntent:
        """The next intent of the stream (a release of the oldest live grant, or a new request)."""
        self.count += 1
        live = self.watch.live
        if self.count % 2 and live:
            allocation_id = next(iter(live))
            namespace, pool = live.pop(allocation_id)
            return intents.ReleaseAllocation(intent_id=f"rel-{allocation_id}-{self.count}",
                                             allocation_id=allocation_id, namespace=namespace, pool=pool)
        self.made += 1
        return requests("new", 1, first=self.made - 1)[0]

    async def publish_paced(self, js: object, rate: float, count: int) -> list[intents.AnyIntent]:
        """Offer ``count`` intents at ``rate``/s, each made when it is due (so releases name grants live then)."""
        sent: list[intents.AnyIntent] = []
        start = time.perf_counter()
        for n in range(count):
            delay = start + n / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            intent = self.next()
            self.watch.sent[intent.intent_id] = time.perf_counter()
            await messaging.publish_intent(js, intent)  # type: ignore[arg-type]
            sent.append(intent)
        return sent


def _tally(watch: Watch, batch: list[intents.AnyIntent]) -> str:
    counts: dict[str, int] = {}
    for intent in batch:
        for tag in watch.tags.get(intent.intent_id, ["none"]):
            counts[tag] = counts.get(tag, 0) + 1
    return ", ".join(f"{n} {tag}" for tag, n in sorted(counts.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="100,500,1000", help="offered loads, intents/s")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per offered load")
    parser.add_argument("--burst", type=int, default=8000, help="intents published at once")
    parser.add_argument("--saturated", action="store_true", help="the cluster full, --waiting requests queued")
    parser.add_argument("--waiting", type=int, default=5000, help="saturated: requests waiting in the queue")
    parser.add_argument("--stream", type=int, default=2000,
                        help="saturated: intents (release / request alternating) offered at once")
    parser.add_argument("--scale", type=int, default=1, help="saturated: openb cluster replicas")
    parser.add_argument("--settle", type=float, default=5.0,
                        help="saturated: seconds between the fill and the first measurement")
    parser.add_argument("--timeout", type=float, default=600, help="saturated: seconds to wait for the outcomes")
    args = parser.parse_args()
    if args.saturated and "--rates" not in sys.argv:
        args.rates = "200"
    if args.scale < 1 or args.waiting < 1 or args.stream < 2:
        parser.error("--scale and --waiting must be >= 1, --stream >= 2")
    args.rates = [int(r) for r in args.rates.split(",")]
    root = Path(tempfile.mkdtemp(prefix="gpuledger-bench-"))
    try:
        asyncio.run(run(args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
