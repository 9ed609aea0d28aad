"""``trace replay``: the trace through the running stack (NATS → allocator → PostgreSQL) in time.

Pods arrive at their creation_time and leave at their deletion_time, both compressed by
``speedup``; each arrival is a RequestAllocation and each departure a ReleaseAllocation,
published with ``publish_intent``. Outcomes are read from the allocator's event subjects
(``gpuledger.event.>``, each message carrying the deciding intent id), so releases, queueing
and grants from the queue happen for real. At the end the log is verified
(``services.allocator.adapters.verify.verify``: rebuild = snapshot = read models) and the
report carries its digest.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence

import msgspec
from nats.aio.msg import Msg
from nats.js.client import JetStreamContext

from events import codec, subjects
from events import decisions as ev
from events.intents import RegisterNode, ReleaseAllocation, RequestAllocation
from services.allocator.adapters import database
from services.allocator.adapters.postgres import PostgresEventStore
from services.allocator.adapters.relay import INTENT_HEADER
from services.allocator.adapters.verify import verify
from services.shared import messaging
from services.trace.openb import TracePod
from services.trace.replay_report import ReplayReport, percentiles

REPLAY_POOL = "trace"


class ReplayError(RuntimeError):
    """The replay could not run (no timestamps, stack unreachable, outcomes missing)."""


class Tracker:
    """Folds the allocator's events into per-pod outcomes, latencies and the allocated milli-GPU."""

    def __init__(self, pods: dict[str, TracePod]) -> None:
        self.pods = pods
        self.sent: dict[str, float] = {}
        self.latency: list[float] = []
        self.queue_wait: list[float] = []
        self.queued_at: dict[str, float] = {}
        self.state: dict[str, str] = {}
        self.outcomes: dict[str, int] = {}
        self.decided: set[str] = set()
        self.used_milli = 0
        self.nodes_registered = 0

    def on_event(self, event: ev.AnyEvent, intent_id: str, now: float) -> None:
        """Apply one event (decided by ``intent_id``) received at ``now`` (monotonic seconds)."""
        if intent_id in self.sent and intent_id not in self.decided:
            self.decided.add(intent_id)
            self.latency.append(now - self.sent[intent_id])
        match event:
            case ev.NodeRegistered():
                self.nodes_registered += 1
            case ev.AllocationGranted(spec=spec) if spec.allocation_id in self.pods:
                aid = spec.allocation_id
                if event.from_queue and aid in self.queued_at:
                    self.queue_wait.append(now - self.queued_at.pop(aid))
                else:
                    self.outcomes[aid] = self.outcomes.get(aid, 0) + 1
                self.state[aid] = "granted"
                self.used_milli += self.pods[aid].demand
            case ev.AllocationQueued(spec=spec) | ev.AllocationRejected(spec=spec) if spec.allocation_id in self.pods:
                aid = spec.allocation_id
                self.outcomes[aid] = self.outcomes.get(aid, 0) + 1
                queued = isinstance(event, ev.AllocationQueued)
                self.state[aid] = "queued" if queued else "rejected"
                if queued:
                    self.queued_at[aid] = now
            case ev.AllocationReleased(allocation_id=aid) if aid in self.pods:
                if self.state.get(aid) == "granted":
                    self.used_milli -= self.pods[aid].demand
                self.queued_at.pop(aid, None)
                self.state[aid] = "withdrawn" if event.was_queued else "released"
            case _:
                pass

    def final_counts(self) -> dict[str, int]:
        """How many pods ended in each state (``none``: no outcome seen)."""
        counts: dict[str, int] = {}
        for aid in self.pods:
            state = self.state.get(aid, "none")
            counts[state] = counts.get(state, 0) + 1
        return counts

    def multiple_outcomes(self) -> int:
        """Pods whose request got more than one first outcome (must be 0)."""
        return sum(1 for n in self.outcomes.values() if n > 1)


def timeline(pods: Sequence[TracePod], run: str) -> list[tuple[int, int, TracePod, str]]:
    """(trace second, order, pod, allocation id) of arrivals (order 1) and departures (order 0).

    Raises ReplayError when a pod has no creation_time.
    """
    out: list[tuple[int, int, TracePod, str]] = []
    for pod in pods:
        if pod.created is None:
            raise ReplayError(f"pod {pod.name} has no creation_time: replay needs a trace with timestamps")
        aid = f"{run}-{pod.name}"
        out.append((pod.created, 1, pod, aid))
        if pod.deleted is not None and pod.deleted > pod.created:
            out.append((pod.deleted, 0, pod, aid))
    out.sort(key=lambda e: (e[0], e[1], e[3]))
    return out


async def _wait(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def _publish(js: JetStreamContext, intent: RequestAllocation | ReleaseAllocation | RegisterNode,
                   tracker: Tracker) -> None:
    tracker.sent[intent.intent_id] = time.monotonic()
    await messaging.publish_intent(js, intent)


async def _drive(js: JetStreamContext, events: list[tuple[int, int, TracePod, str]], tracker: Tracker,
                 *, speedup: float, capacity_milli: int) -> tuple[float, list[tuple[float, float]]]:
    """Publish the timeline on schedule; returns the wall seconds and (trace hours, allocated %) samples."""
    t0 = events[0][0]
    span = max(1, events[-1][0] - t0)
    every = max(1, span // 40)
    samples: list[tuple[float, float]] = []
    next_sample = t0
    start = time.monotonic()
    for at, order, pod, aid in events:
        delay = start + (at - t0) / speedup - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        while at >= next_sample:
            samples.append(((next_sample - t0) / 3600, round(100 * tracker.used_milli / capacity_milli, 3)))
            next_sample += every
        if order == 1:
            await _publish(js, RequestAllocation(intent_id=f"{aid}-req", spec=pod.spec(
                pool=REPLAY_POOL, allocation_id=aid, namespace="trace")), tracker)
        else:
            await _publish(js, ReleaseAllocation(intent_id=f"{aid}-rel", allocation_id=aid, namespace="trace",
                                                 pod=aid, pool=REPLAY_POOL, reason="trace deletion_time"), tracker)
    return time.monotonic() - start, samples


async def _verify(database_url: str) -> tuple[bool, str, int, list[str]]:
    pool = await database.create_pool(database_url, max_size=2)
    try:
        report = await verify(PostgresEventStore(pool))
    finally:
        await pool.close()
    return report.ok, report.digest, report.position, list(report.problems)


async def _register_nodes(js: JetStreamContext, nodes: Sequence[RegisterNode], tracker: Tracker, *, run: str,
                          timeout_s: float) -> None:
    node_ids = []
    for intent in nodes:
        node_ids.append(f"{run}-{intent.intent_id}")
        await _publish(js, msgspec.structs.replace(intent, intent_id=node_ids[-1], pool=REPLAY_POOL), tracker)
    if not await _wait(lambda: all(i in tracker.decided for i in node_ids), timeout_s):
        raise ReplayError(f"the allocator did not register {len(nodes)} nodes within {timeout_s}s")
    tracker.latency.clear()


async def replay_trace(nodes: Sequence[RegisterNode], pods: Sequence[TracePod], *, nats_url: str,
                       database_url: str, speedup: float, timeout_s: float = 60.0) -> ReplayReport:
    """Replay ``pods`` on ``nodes`` (registered into pool ``trace``) through the stack at ``speedup``.

    Raises ReplayError when the trace has no timestamps or the stack does not decide in time.
    """
    run = uuid.uuid4().hex[:8]
    events = timeline(pods, run)
    if not events:
        raise ReplayError("the trace has no pods")
    tracker = Tracker({f"{run}-{p.name}": p for p in pods})
    intents = [f"{aid}-{'req' if order == 1 else 'rel'}" for _, order, _, aid in events]
    nc = await messaging.connect(nats_url, name="gpuledger-trace-replay")
    try:
        async def on_msg(msg: Msg) -> None:
            intent_id = (msg.headers or {}).get(INTENT_HEADER, "")
            tracker.on_event(codec.decode_event(msg.data), intent_id, time.monotonic())

        await nc.subscribe(f"{subjects.EVENT_SUBJECT_PREFIX}.>", cb=on_msg)
        js = nc.jetstream()
        await _register_nodes(js, nodes, tracker, run=run, timeout_s=timeout_s)
        started = time.monotonic()
        _, samples = await _drive(js, events, tracker, speedup=speedup,
                                  capacity_milli=1000 * sum(len(n.gpus) for n in nodes))
        complete = await _wait(lambda: all(i in tracker.decided for i in intents), timeout_s)
        wall = time.monotonic() - started
    finally:
        await nc.close()
    ok, digest, position, problems = await _verify(database_url)
    decided = sum(1 for i in intents if i in tracker.decided)
    if not complete:
        problems.append(f"{len(intents) - decided} intents had no decision within {timeout_s}s")
    return ReplayReport(
        pods=len(pods), intents=len(intents), decided=decided, seconds=round(wall, 3), speedup=speedup,
        decisions_per_s=round(len(tracker.latency) / wall, 1) if wall else 0.0,
        latency_ms=percentiles(tracker.latency), queue_wait_ms=percentiles(tracker.queue_wait),
        final_states=tracker.final_counts(), multiple_outcomes=tracker.multiple_outcomes(),
        allocation_pct_over_time=samples, verified=ok and complete, digest=digest, position=position,
        problems=problems,
    )
