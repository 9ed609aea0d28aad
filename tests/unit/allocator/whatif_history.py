"""Seeded histories for the what-if tests: random intents decided by ``domain.process`` at advancing
times and appended to an in-memory log, one DecidedIntent per intent, as the allocator does."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta

from events import intents as it
from events.values import AllocationSpec, GangSpec, PoolConfig, Resources
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.domain import ClusterState, Scheduler, process
from services.allocator.ports import DecidedIntent
from tests.unit.allocator.builders import Gi, a_gpu, a_quota, res

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LEASE = "allocator"


class Recorder:
    """Decides intents like the writer (one long-lived Scheduler) and appends each to a log."""

    def __init__(self) -> None:
        self.leases = InMemoryLeaseStore()
        self.store = InMemoryEventStore(self.leases)
        self.state = ClusterState.empty()
        self.scheduler = Scheduler()
        self.now = T0
        self.n = 0
        self.store_times: dict[int, datetime] = {}  # log position -> its decision time
        lease = asyncio.run(self.leases.acquire(LEASE, holder="test", ttl_s=10**9, now=T0))
        assert lease is not None
        self.epoch = lease.epoch

    def send(self, intent: it.AnyIntent) -> None:
        """Decide ``intent`` now and append its events."""
        events = process(self.state, intent, self.now, self.scheduler)
        decided = DecidedIntent(intent_id=intent.intent_id, stream_seq=0, events=tuple(events))
        stored = asyncio.run(self.store.append([decided], lease=LEASE, epoch=self.epoch, state=self.state))
        self.store_times.update((s.position, s.event.at) for s in stored)

    def next_id(self) -> str:
        self.n += 1
        return f"i{self.n}"

    def tick(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


NODES = {
    "n1": (("A100_SXM_80G", 700, 80), ("A100_SXM_80G", 700, 80)),
    "n2": (("L4", 120, 24), ("L4", 120, 24), ("L4", 120, 24), ("L4", 120, 24)),
    "n3": (("A100_SXM_80G", 700, 80),),
    "n4": (("L4", 120, 24), ("L4", 120, 24)),
}
GANGS = (GangSpec(key="a/g1", quorum=2, desired=3, timeout_s=40), GangSpec(key="b/g2", quorum=2, desired=2))
QOS = ("low", "medium", "medium", "high", "critical")


def register(r: Recorder, node: str, *, schedulable: bool = True, ttl: float = 0.0) -> None:
    gpus = tuple(a_gpu(f"{node}-g{i}", tflops, gib * Gi, model=model, index=i)
                 for i, (model, tflops, gib) in enumerate(NODES[node]))
    r.send(it.RegisterNode(intent_id=r.next_id(), node=node, pool="p", gpus=gpus, cpu_milli=64_000,
                           memory_bytes=256 * Gi, schedulable=schedulable, heartbeat_ttl_s=ttl))


def history(seed: int, *, strategy: str, steps: int = 160) -> Recorder:
    """A random history on pool ``p``: requests (plain, shared, gang, partitioned), releases,
    resizes, re-reports and cordons, quota changes, heartbeat checks, node removal, bad intents."""
    rng = random.Random(seed)
    r = Recorder()
    r.send(it.ConfigurePool(intent_id=r.next_id(), pool="p", config=PoolConfig(placement=strategy)))
    for node in NODES:
        register(r, node, ttl=30.0 if node == "n4" else 0.0)
    r.send(it.SetQuota(intent_id=r.next_id(), namespace="b", spec=a_quota(req=(900, 200 * Gi))))
    live: list[str] = []
    removed = False
    for step in range(steps):
        r.tick(rng.choice([0, 1, 5, 12]))
        roll = rng.random()
        uid = f"u{step}"
        if roll < 0.45:
            spec = _request(rng, uid)
            r.send(it.RequestAllocation(intent_id=r.next_id(), spec=spec))
            live.append(uid)
        elif roll < 0.65 and live:
            gone = live.pop(rng.randrange(len(live)))
            r.send(it.ReleaseAllocation(intent_id=r.next_id(), allocation_id=gone, reason="finished"))
        elif roll < 0.7 and live:
            new = res(rng.choice([10, 30, 60]), 2 * Gi)
            r.send(it.ResizeAllocation(intent_id=r.next_id(), allocation_id=rng.choice(live), request=new, limit=new))
        elif roll < 0.78:
            node = rng.choice(["n1", "n2", "n3"] + ([] if removed else ["n4"]))
            register(r, node, schedulable=rng.random() > 0.2, ttl=30.0 if node == "n4" else 0.0)
        elif roll < 0.82:
            r.send(it.CheckHeartbeats(intent_id=r.next_id()))
        elif roll < 0.85:
            r.send(it.SetQuota(intent_id=r.next_id(), namespace="b",
                               spec=a_quota(req=(rng.choice([300, 900, 2000]), 200 * Gi))))
        elif roll < 0.87 and not removed:
            removed = True
            r.send(it.RemoveNode(intent_id=r.next_id(), node="n4"))
        elif roll < 0.9:
            r.send(it.ReleaseAllocation(intent_id=r.next_id(), allocation_id="nobody"))  # an IntentRejected
        else:
            r.tick(30)
    return r


def _request(rng: random.Random, uid: str) -> AllocationSpec:
    kind = rng.random()
    ns = rng.choice(["a", "b"])
    qos = rng.choice(QOS)
    if kind < 0.15:
        gang = rng.choice(GANGS)
        request = res(rng.choice([50, 100]), 8 * Gi)
        return AllocationSpec(allocation_id=uid, namespace=gang.key.split("/")[0], pod=uid, pool="p", request=request,
                              limit=request, gang=gang, qos=qos)
    if kind < 0.3:
        request = res(rng.choice([0, 90, 150]), rng.choice([0, 11, 30]) * 10**9)
        return AllocationSpec(allocation_id=uid, namespace=ns, pod=uid, pool="p", request=request, limit=request,
                              isolation="partitioned", partition_template=rng.choice(["", "1g.10gb", "3g.40gb"]),
                              qos=qos)
    plain: Resources = res(rng.choice([10, 40, 60, 100, 300]), rng.choice([2, 8, 20]) * Gi)
    return AllocationSpec(allocation_id=uid, namespace=ns, pod=uid, pool="p", request=plain, limit=plain,
                          gpu_count=rng.choice([1, 1, 1, 2]), qos=qos)
