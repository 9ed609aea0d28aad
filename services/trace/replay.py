"""``trace replay``: the trace through the running stack (NATS → allocator → PostgreSQL) in time.

Pods arrive at their creation_time and leave at their deletion_time, both compressed by
``speedup``; each arrival is a RequestAllocation and each departure a ReleaseAllocation,
published with ``publish_intent``. Outcomes are read from the allocator's event subjects
(``gpuledger.event.>``, each message carrying the deciding intent id), so releases, queueing
and grants from the queue happen for real. At the end the log is verified
(``services.allocator.api.verify.verify``: rebuild = snapshot = read models) and the
report carries its digest.

Isolation: the replay has its own pool (``trace``), namespace (``trace``) and node and GPU names
(``trace-`` + the trace's name), and every request targets that pool, so the default pool's nodes
and allocations are never touched. When ``stop`` is set (Ctrl-C / SIGTERM in the CLI) it stops
publishing, releases or withdraws every allocation it still holds, waits for those decisions and
returns a report marked ``interrupted``. At the end, interrupted or not (and also when it fails
after registering nodes), it releases what it still holds and removes its nodes (RemoveNode), so
the pool ``trace`` leaves the stack's node and GPU totals; ``final_states`` are counted before.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Sequence

import msgspec
from nats.aio.msg import Msg
from nats.js.client import JetStreamContext

from events import codec, subjects
from events.intents import RegisterNode, ReleaseAllocation, RemoveNode, RequestAllocation
from services.allocator.adapters import database
from services.allocator.adapters.postgres import PostgresEventStore
from services.allocator.adapters.relay import INTENT_HEADER
from services.allocator.api.verify import verify
from services.shared import messaging
from services.trace.openb import TracePod
from services.trace.replay_report import ReplayReport, Tracker, percentiles

REPLAY_POOL = "trace"
REPLAY_NAMESPACE = "trace"
NAME_PREFIX = "trace-"
"""Prefix of the replay's node and GPU names: never the names of the default pool's nodes."""

Progress = Callable[[int, int, float], None]
"""``progress(done, total, allocated_pct)``: called as the timeline is published."""


class ReplayError(RuntimeError):
    """The replay could not run (no timestamps, stack unreachable, outcomes missing)."""


def replay_nodes(nodes: Sequence[RegisterNode], run: str) -> list[RegisterNode]:
    """``nodes`` moved into the replay's own pool under prefixed node and GPU names (fresh intent ids)."""
    out = []
    for intent in nodes:
        gpus = tuple(msgspec.structs.replace(g, name=NAME_PREFIX + g.name, uuid="") for g in intent.gpus)
        out.append(msgspec.structs.replace(intent, intent_id=f"{run}-{intent.intent_id}", pool=REPLAY_POOL,
                                           node=NAME_PREFIX + intent.node, gpus=gpus))
    return out


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


def trace_span(pods: Sequence[TracePod]) -> int:
    """Seconds of trace time from the first arrival to the last departure or arrival (at least 1)."""
    times = [t for p in pods for t in (p.created, p.deleted) if t is not None]
    return max(1, max(times, default=0) - min(times, default=0))


async def _wait(ids: Sequence[str], tracker: Tracker, stall_s: float) -> bool:
    """Wait until every intent of ``ids`` is decided; False when no new decision came for ``stall_s``
    seconds (a busy allocator that keeps deciding is waited for, a stalled one is not)."""
    last_done, last_change = -1, time.monotonic()
    while (done := sum(1 for i in ids if i in tracker.decided)) < len(ids):
        if done != last_done:
            last_done, last_change = done, time.monotonic()
        elif time.monotonic() - last_change > stall_s:
            return False
        await asyncio.sleep(0.05)
    return True


async def _publish(js: JetStreamContext, intent: RequestAllocation | ReleaseAllocation | RegisterNode,
                   tracker: Tracker) -> None:
    tracker.sent[intent.intent_id] = time.monotonic()
    await messaging.publish_intent(js, intent)


def _release(aid: str, suffix: str, reason: str) -> ReleaseAllocation:
    return ReleaseAllocation(intent_id=f"{aid}-{suffix}", allocation_id=aid, namespace=REPLAY_NAMESPACE, pod=aid,
                             pool=REPLAY_POOL, reason=reason)


async def _drive(js: JetStreamContext, events: list[tuple[int, int, TracePod, str]], tracker: Tracker,
                 *, speedup: float, capacity_milli: int, stop: asyncio.Event,
                 progress: Progress | None) -> list[tuple[float, float]]:
    """Publish the timeline on schedule until done or ``stop``; returns (trace hours, allocated %) samples."""
    t0 = events[0][0]
    every = max(1, (events[-1][0] - t0) // 40)
    samples: list[tuple[float, float]] = []
    next_sample = t0
    start = time.monotonic()
    for done, (at, order, pod, aid) in enumerate(events):
        delay = start + (at - t0) / speedup - time.monotonic()
        if delay > 0 and await _stopped(stop, delay):
            break
        if stop.is_set():
            break
        allocated = round(100 * tracker.used_milli / capacity_milli, 3)
        while at >= next_sample:
            samples.append(((next_sample - t0) / 3600, allocated))
            next_sample += every
        if order == 1:
            await _publish(js, RequestAllocation(intent_id=f"{aid}-req", spec=pod.spec(
                pool=REPLAY_POOL, allocation_id=aid, namespace=REPLAY_NAMESPACE)), tracker)
        else:
            await _publish(js, _release(aid, "rel", "trace deletion_time"), tracker)
        if progress is not None:
            progress(done + 1, len(events), allocated)
    return samples


async def _stopped(stop: asyncio.Event, delay: float) -> bool:
    try:
        async with asyncio.timeout(delay):
            await stop.wait()
    except TimeoutError:
        return False
    return True


async def _release_live(js: JetStreamContext, tracker: Tracker, timeout_s: float, *, interrupted: bool) -> int:
    """Release (or withdraw) every allocation the replay still holds; returns how many."""
    live = tracker.live()
    ids = []
    for aid in live:
        intent = (_release(aid, "interrupted", "trace replay interrupted") if interrupted
                  else _release(aid, "end", "trace replay finished"))
        ids.append(intent.intent_id)
        await _publish(js, intent, tracker)
    await _wait(ids, tracker, timeout_s)
    return len(live)


async def _remove_nodes(js: JetStreamContext, nodes: Sequence[RegisterNode], tracker: Tracker,
                        timeout_s: float) -> int:
    """Remove the replay's nodes again (RemoveNode each; any allocation left on them is released by
    the allocator); returns how many were decided within the stall timeout."""
    removals = [RemoveNode(intent_id=f"{n.intent_id}-remove", node=n.node, pool=REPLAY_POOL) for n in nodes]
    for intent in removals:
        tracker.sent[intent.intent_id] = time.monotonic()
        await messaging.publish_intent(js, intent)
    await _wait([r.intent_id for r in removals], tracker, timeout_s)
    return sum(1 for r in removals if r.intent_id in tracker.decided)


async def _verify(database_url: str) -> tuple[bool, str, int, list[str]]:
    pool = await database.create_pool(database_url, max_size=2)
    try:
        report = await verify(PostgresEventStore(pool))
    finally:
        await pool.close()
    return report.ok, report.digest, report.position, list(report.problems)


async def _register_nodes(js: JetStreamContext, nodes: Sequence[RegisterNode], tracker: Tracker,
                          *, timeout_s: float) -> None:
    for intent in nodes:
        await _publish(js, intent, tracker)
    if not await _wait([i.intent_id for i in nodes], tracker, timeout_s):
        raise ReplayError(f"the allocator stopped registering the {len(nodes)} nodes (no decision for {timeout_s}s)")
    tracker.latency.clear()


async def replay_trace(nodes: Sequence[RegisterNode], pods: Sequence[TracePod], *, nats_url: str,
                       database_url: str, speedup: float, timeout_s: float = 60.0,
                       stop: asyncio.Event | None = None, progress: Progress | None = None) -> ReplayReport:
    """Replay ``pods`` on ``nodes`` (registered into pool ``trace`` under ``trace-`` names) through
    the stack at ``speedup``; ``stop`` interrupts it (live allocations are released first).

    Raises ReplayError when the trace has no timestamps or the stack does not decide in time.
    """
    stop = stop or asyncio.Event()
    run = uuid.uuid4().hex[:8]
    events = timeline(pods, run)
    if not events:
        raise ReplayError("the trace has no pods")
    own_nodes = replay_nodes(nodes, run)
    tracker = Tracker({f"{run}-{p.name}": p for p in pods})
    nc = await messaging.connect(nats_url, name="gpuledger-trace-replay", allow_reconnect=False)
    released = removed = 0
    registered = False
    try:
        async def on_msg(msg: Msg) -> None:
            intent_id = (msg.headers or {}).get(INTENT_HEADER, "")
            tracker.on_event(codec.decode_event(msg.data), intent_id, time.monotonic())

        await nc.subscribe(f"{subjects.EVENT_SUBJECT_PREFIX}.>", cb=on_msg)
        js = nc.jetstream()
        registered = True  # from here on the stack may hold some of the replay's nodes
        await _register_nodes(js, own_nodes, tracker, timeout_s=timeout_s)
        started = time.monotonic()
        samples = await _drive(js, events, tracker, speedup=speedup, stop=stop, progress=progress,
                               capacity_milli=1000 * sum(len(n.gpus) for n in nodes))
        intents = [i for i in tracker.sent if i.endswith(("-req", "-rel"))]
        complete = await _wait(intents, tracker, timeout_s)
        wall = time.monotonic() - started
        final_states = tracker.final_counts()  # the cleanup below must not count as the trace's outcomes
        latency, queue_wait = percentiles(tracker.latency), percentiles(tracker.queue_wait)
        decisions = len(tracker.latency)
        held = await _release_live(js, tracker, timeout_s, interrupted=stop.is_set())
        released = held if stop.is_set() else 0
    finally:
        if registered:  # also after a failure: the replay's nodes must not stay in the stack's totals
            with contextlib.suppress(Exception):
                removed = await _remove_nodes(nc.jetstream(), own_nodes, tracker, timeout_s)
        await nc.close()
    ok, digest, position, problems = await _verify(database_url)
    decided = sum(1 for i in intents if i in tracker.decided)
    if not complete:
        problems.append(f"{len(intents) - decided} intents had no decision (none came for {timeout_s}s)")
    return ReplayReport(
        pods=len(pods), intents=len(intents), decided=decided, seconds=round(wall, 3), speedup=speedup,
        decisions_per_s=round(decisions / wall, 1) if wall else 0.0, latency_ms=latency, queue_wait_ms=queue_wait,
        final_states=final_states, multiple_outcomes=tracker.multiple_outcomes(),
        allocation_pct_over_time=samples, verified=ok and complete, digest=digest,
        position=position, problems=problems, interrupted=stop.is_set(), released_on_interrupt=released,
        removed_nodes=removed,
    )
