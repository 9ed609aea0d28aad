"""Pools without shares decide exactly as before shares existed: a seeded story of 400 intents
(requests of every QoS, whole-GPU and fractional, a namespace quota, a gang, preemptions, resizes,
releases) emits byte-for-byte the events it emitted before (their encodings' sha256, taken on
the commit before shares, c7fd4f7)."""

from __future__ import annotations

import collections
import hashlib
import random

from events import codec
from events import decisions as ev
from events import intents as it
from events.values import AllocationSpec, GangSpec, Resources
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_quota, tf

BEFORE_SHARES = "b09ce2401c5200e060bc9d02ad12a1942862328bcfc96eca82c612bcdb34fe09"
"""sha256 of the story's encoded events, newline-joined, before shares (489 events)."""


def story() -> list[ev.AnyEvent]:
    """The seeded story's events (a pool without shares)."""
    rng = random.Random(30)
    c = Cluster()
    c.pool("p", preemption="cluster")
    c.quota("q", a_quota(req=(250, 40 * Gi)))
    for k in range(3):
        c.node(f"n{k}", "p", *(a_gpu(f"n{k}-g{i}", 100, 16 * Gi, index=i) for i in range(2 + k % 2)))
    live: list[str] = []
    for step in range(400):
        roll = rng.random()
        if roll < 0.55 or not live:
            uid = f"u{step}"
            t = rng.choice([10, 25, 50, 100])
            request = Resources(milli_tflops=tf(t), vram_bytes=rng.choice([1, 4, 8]) * Gi)
            gang = GangSpec(key="g/w", quorum=2, desired=2) if rng.random() < 0.05 else None
            spec = AllocationSpec(allocation_id=uid, namespace=rng.choice(["p1", "q", "r"]), pod=uid, pool="p",
                                  request=request, limit=request, gpu_count=rng.choice([1, 1, 2]),
                                  qos=rng.choice(["low", "medium", "high", "critical"]),
                                  isolation=rng.choice(["soft", "soft", "shared"]), gang=gang)
            c.send(it.RequestAllocation(intent_id=f"r{step}", spec=spec))
            live.append(uid)
        elif roll < 0.85:
            uid = live.pop(rng.randrange(len(live)))
            c.send(it.ReleaseAllocation(intent_id=f"x{step}", allocation_id=uid))
        else:
            uid = rng.choice(live)
            request = Resources(milli_tflops=tf(rng.choice([5, 20, 40])), vram_bytes=Gi)
            c.send(it.ResizeAllocation(intent_id=f"z{step}", allocation_id=uid, request=request, limit=request))
        c.tick(rng.choice([1, 30, 400]))
    return c.events


def test_a_pool_without_shares_emits_the_same_bytes_as_before_shares() -> None:
    events = story()
    kinds = collections.Counter(type(e).__name__ for e in events)
    assert kinds["AllocationPreempted"] and kinds["AllocationQueued"] and kinds["AllocationResized"]
    assert not any(isinstance(e, ev.AllocationGranted) and (e.share or e.borrowed) for e in events)
    data = b"\n".join(codec.encode(e) for e in events)
    assert (len(events), hashlib.sha256(data).hexdigest()) == (489, BEFORE_SHARES)
