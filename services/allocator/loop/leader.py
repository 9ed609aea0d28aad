"""The allocator service: the leader's fetch -> decide -> commit -> ack loop, and the standby's tail.

The loop sees the world only through ports (services/allocator/ports.py): the ``EventStore``, the
``Leadership`` (the lease keeper), the ``IntentSource`` (JetStream's durable consumer, or the
in-memory twin) and the ``EventSink`` (the relay to GPULEDGER_EVENTS); the composition root
(services/allocator/bootstrap.py) chooses the adapters. Its rules are unit-tested on the twin
(tests/unit/allocator/test_loop_*.py).

One replica holds the lease; it catches up with the log, rewinds the intent source to its ack
floor, then per batch: decides every intent in stream order (``batch.BatchDecider``), appends
everything in ONE ``EventStore.append`` fenced by its epoch, and only then acks and hands the
stored events to the sink. Deciding yields to the event loop at least every ``decide_slice_s``
seconds (between two intents), so the lease renewal, which runs on its own task, is never starved
by a long batch. What a failure means is decided in one
place (:func:`services.allocator.loop.failures.classify`):

- caused by one intent (an exception in ``decide``, a value PostgreSQL refuses): the projection is
  reloaded and the batch split in halves until the intent is isolated; that intent alone gets an
  ``IntentRejected`` (bounded, sanitised) and the intents around it are decided normally;
- transient or fatal (database or NATS down, a timeout, a fence): the rest is nak'ed, the
  projection reloaded, and leadership re-enters with a rewind, so no intent is skipped, reordered
  or decided twice. The :class:`~services.allocator.loop.watchdog.Watchdog` raises the stuck alarm when
  no progress comes for ``stuck_after_s``.

Sequences missing from GPULEDGER_INTENTS (messages deleted from the stream) are skipped with a log
line. Standbys fold new log events into their projection.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

import structlog

from events import intents
from services.allocator import ports
from services.allocator.domain.state import ClusterState
from services.allocator.loop import batch, failures, liveness
from services.allocator.loop.metrics import AllocatorMetrics
from services.allocator.loop.snapshots import SnapshotPolicy
from services.allocator.loop.watchdog import Watchdog
from services.allocator.ports import (
    Action,
    Clock,
    DecidedIntent,
    Delivery,
    EventSink,
    EventStore,
    FencedError,
    IntentSource,
    Leadership,
    StoredEvent,
    utc_now,
)
from services.allocator.settings import AllocatorSettings
from services.shared import lifecycle

log = structlog.get_logger(__name__)

PublishIntent = Callable[[intents.AnyIntent], Awaitable[object]]

DECIDE_SLICE_S = 0.02
"""Longest stretch (seconds) the leader decides without yielding to the event loop: the lease
renewal (every ``lease_renew_s``, 0.3 s by default) waits at most about this long for a turn."""


class Allocator:
    """One allocator replica. ``state`` is its projection (position = last applied log position).

    ``keeper`` (Leadership), ``consumer`` (IntentSource) and ``relay`` (EventSink) are ports;
    ``publish`` sends an intent (the liveness tick's CheckHeartbeats); ``process`` decides one
    intent (``domain.process`` with the loop's Scheduler); ``decide_slice_s`` bounds how long
    deciding runs before it yields (seconds)."""

    def __init__(self, *, settings: AllocatorSettings, store: EventStore, keeper: Leadership,
                 consumer: IntentSource, relay: EventSink, publish: PublishIntent,
                 process: batch.Process, evolve: batch.Evolve, clock: Clock = utc_now,
                 decide_slice_s: float = DECIDE_SLICE_S) -> None:
        self.settings = settings
        self.store = store
        self.keeper = keeper
        self.consumer = consumer
        self.relay = relay
        self.metrics = AllocatorMetrics()
        self.watchdog = Watchdog(self.metrics.registry, stuck_after_s=settings.stuck_after_s, relay_lag=lambda: (
            max(0, self.state.position - relay.offset) if keeper.is_leader else 0))
        relay.on_skip = self.watchdog.relay_skipped.inc
        self._publish = publish
        self._process = process
        self._evolve = evolve
        self._clock = clock
        self.decide_slice_s = decide_slice_s
        self.state = ClusterState.empty()
        self.loaded = asyncio.Event()
        self._expected_seq = 0
        self._failures = 0
        self._rewind_needed = False
        self._reconnected = asyncio.Event()
        self._snapshots = SnapshotPolicy(every=settings.snapshot_every)
        self.listeners: list[Callable[[Sequence[StoredEvent]], None]] = []
        """Called with each committed batch (the composition root counts the outcomes for /metrics)."""
        self.heap = lifecycle.HeapKeeper()
        """Settled once the projection is loaded, tended between batches (full collections stay short)."""

    async def run(self, stop: asyncio.Event) -> None:
        """Load the projection, then lead or stand by until ``stop``; releases the lease on exit."""
        try:
            await self.reload()
            self._snapshots.saved(self.state.position)
            self.loaded.set()
            await lifecycle.supervise(stop, self.keeper.run(stop), self._work(stop), liveness.check_heartbeats(
                stop, period_s=self.settings.heartbeat_check_s, is_leader=lambda: self.keeper.is_leader,
                state=lambda: self.state, now=self._clock, publish=self._publish))
        finally:
            await self.consumer.close()
            await self.keeper.release()

    @property
    def stuck(self) -> bool:
        """True when the loop has failed without progress for ``stuck_after_s`` (``/readyz`` 503)."""
        return self.watchdog.stuck

    def request_rewind(self) -> None:
        """Called on a bus reconnect: in-flight deliveries may be lost, so re-position the consumer;
        a back-off in progress ends at once (the first commit follows the server's return)."""
        self._rewind_needed = True
        self._reconnected.set()

    async def reload(self) -> None:
        """Replace the projection with the log's (snapshot + replay), retrying until it succeeds."""
        while True:
            try:
                self.state = await self.store.load_state()
                self.metrics.position.set(self.state.position)
                self.heap.settle()
                return
            except Exception as exc:  # database down: wait and retry
                log.warning("loading state failed; retrying", error=repr(exc))
                await self._backoff(exc)

    async def _backoff(self, exc: BaseException) -> None:
        """Record a failure without progress and wait (doubling from retry_delay_s to retry_max_s)."""
        self.watchdog.failed(self._expected_seq, exc)
        delay = min(self.settings.retry_max_s, self.settings.retry_delay_s * 2 ** min(self._failures, 16))
        self._failures += 1
        self._reconnected.clear()
        await lifecycle.wait_event(self._reconnected, delay)

    async def _work(self, stop: asyncio.Event) -> None:
        # Every loop also checks ``stop``: on Python 3.11 a cancellation can be swallowed inside
        # libraries (asyncio.wait_for), and the service must still end.
        while not stop.is_set():
            self.metrics.leader.set(1 if self.keeper.is_leader else 0)
            self.metrics.epoch.set(self.keeper.epoch)
            if self.keeper.is_leader:
                await self._lead(self.keeper.epoch, stop)
            else:
                await self._follow()

    async def _follow(self) -> None:
        self.keeper.changed.clear()
        await self._tail()
        self.heap.tend()
        await lifecycle.wait_event(self.keeper.changed, self.settings.tail_interval_s)

    async def _tail(self) -> None:
        """Fold events appended by the leader into the projection (errors: logged, retried later)."""
        try:
            async for stored in self.store.read(after=self.state.position):
                self.state = self._evolve(self.state, stored.event)
                self.state.position = stored.position
        except Exception as exc:
            log.warning("tailing the log failed", error=repr(exc))
            await self._backoff(exc)
            await self.reload()
        else:
            if not self.keeper.is_leader:
                self._failures = 0
                self.watchdog.progressed()
        self.metrics.position.set(self.state.position)

    async def _lead(self, epoch: int, stop: asyncio.Event) -> None:
        """One leadership session: catch up, rewind, then batches until leadership or a batch fails."""
        try:
            await self._tail()
            self._expected_seq = await self.consumer.rewind()
            await self.relay.resume()
        except Exception as exc:
            log.warning("could not start leading; retrying", error=repr(exc))
            await self._backoff(exc)
            return
        self._rewind_needed = False
        log.info("leading", epoch=epoch, position=self.state.position, start_seq=self._expected_seq)
        relay_stop = asyncio.Event()
        relay_task = asyncio.create_task(self.relay.run(relay_stop))
        try:
            while (self.keeper.epoch == epoch and not self._rewind_needed and not stop.is_set()
                   and await self._step(epoch)):
                self.heap.tend()
        finally:
            relay_stop.set()
            relay_task.cancel()
            await asyncio.wait([relay_task], timeout=10)
            await self.consumer.close()

    async def _step(self, epoch: int) -> bool:
        """Fetch and decide one batch; False when the session must restart (after nak + reload)."""
        try:
            fetched = await self.consumer.fetch(wait_s=self.settings.fetch_wait_s)
        except Exception as exc:
            log.warning("fetch failed", error=repr(exc))
            await self._backoff(exc)
            return False
        if not fetched:
            self.watchdog.progressed()
            return True
        started = time.monotonic()
        try:
            fresh, rest, skipped = await self.consumer.in_order(fetched, self._expected_seq)
        except Exception as exc:  # the bus went away while checking a gap: rewind and retry
            log.warning("ordering the fetch failed", error=repr(exc))
            await self._backoff(exc)
            return False
        self.watchdog.gaps.inc(skipped)
        ok = await self._commit(fresh, epoch=epoch, started=started) if fresh else True
        if rest or not ok:
            await self.consumer.nak(rest if ok else [*fresh, *rest], delay_s=self.settings.retry_delay_s)
            return False
        return True

    async def _decide(self, deliveries: Sequence[Delivery], processed: set[str]) -> batch.BatchResult:
        """``batch.decide_batch`` in slices: yields to the event loop whenever ``decide_slice_s``
        has passed since the last yield (so the lease renewal and the relay get their turn)."""
        decider = batch.BatchDecider(self.state, processed=processed, now=self._clock(),
                                     process=self._process, evolve=self._evolve)
        deadline = time.monotonic() + self.decide_slice_s
        for index, delivery in enumerate(deliveries):
            decider.decide(index, delivery)
            if time.monotonic() >= deadline:
                await asyncio.sleep(0)
                deadline = time.monotonic() + self.decide_slice_s
        return decider.result

    async def _commit(self, msgs: Sequence[Delivery], *, epoch: int, started: float) -> bool:
        """Decide ``msgs``, append in one transaction, then ack; False (state reloaded) when the
        session must restart. A failure one intent causes is isolated (see the module docstring)."""
        if not msgs:
            return True
        try:
            done = await self.store.processed(batch.candidate_ids(msgs))
            result = await self._decide(msgs, done)
            stored = await self._append(result.decided, epoch)
        except batch.IntentFailed as failed:  # an exception in decide: reject that intent alone
            log.warning("deciding an intent failed; rejecting it", seq=msgs[failed.index].stream_seq,
                        error=repr(failed.cause)[:512])
            await self.reload()
            return (await self._commit(msgs[:failed.index], epoch=epoch, started=started)
                    and await self._reject(msgs[failed.index], failed.cause, epoch=epoch, started=started)
                    and await self._commit(msgs[failed.index + 1:], epoch=epoch, started=started))
        except Exception as exc:
            if isinstance(exc, FencedError) or failures.classify(exc) is not failures.Failure.BAD_INPUT:
                await self._recover(exc)
                return False
            await self.reload()  # decide_batch advanced the projection: back to the log's
            if len(msgs) == 1:
                return await self._reject(msgs[0], exc, epoch=epoch, started=started)
            log.warning("append failed on the batch's data; splitting it", size=len(msgs), error=repr(exc)[:512])
            half = len(msgs) // 2
            return (await self._commit(msgs[:half], epoch=epoch, started=started)
                    and await self._commit(msgs[half:], epoch=epoch, started=started))
        await self._committed(msgs, stored, result.actions, started=started)
        self.metrics.duplicates.inc(result.duplicates)
        return True

    async def _append(self, decided: Sequence[DecidedIntent], epoch: int) -> list[StoredEvent]:
        if not decided:
            return []
        with self.watchdog.append_latency.time():
            return await self.store.append(decided, lease=self.settings.lease_name, epoch=epoch, state=self.state)

    async def _reject(self, delivery: Delivery, error: BaseException, *, epoch: int, started: float) -> bool:
        """Append an IntentRejected for ``delivery`` alone (its decision or append failed with ``error``)."""
        log.warning("intent isolated and rejected", seq=delivery.stream_seq, error=repr(error)[:512])
        try:
            if await self.store.processed(batch.candidate_ids([delivery])):
                stored: list[StoredEvent] = []  # decided before: only the ack was missing
            else:
                decided = batch.rejected_alone(self.state, delivery, error, now=self._clock(), evolve=self._evolve)
                stored = await self._append([decided], epoch)
                self.watchdog.isolated.inc()
        except Exception as exc:  # the rejection itself could not be stored: the database is at fault
            await self._recover(exc)
            return False
        await self._committed([delivery], stored, [ports.ACK], started=started)
        return True

    async def _committed(self, msgs: Sequence[Delivery], stored: list[StoredEvent], actions: Sequence[Action], *,
                         started: float) -> None:
        """After a commit: advance, hand the events to the relay, count, then ack."""
        if stored:
            self.state.position = stored[-1].position
        self._expected_seq = msgs[-1].stream_seq + 1 if msgs else self._expected_seq
        self._failures = 0
        self.watchdog.progressed()
        self.relay.offer(stored)
        for listener in self.listeners:
            listener(stored)
        self.metrics.record_commit(stored, intents=len(msgs), seconds=time.monotonic() - started)
        self.metrics.position.set(self.state.position)
        try:
            await self.consumer.settle(msgs, actions)
        except Exception as exc:  # committed; a rewind redelivers and the processed check skips them
            log.warning("ack failed after commit", error=repr(exc))
            self._rewind_needed = True
        await self._maybe_snapshot()

    async def _recover(self, exc: Exception) -> None:
        """After a failed decide/append: step down if fenced, back off, reload the projection."""
        self.metrics.retries.inc()
        if isinstance(exc, FencedError):
            log.warning("append fenced: another allocator holds the lease", error=str(exc))
            self.keeper.step_down()
        else:
            log.warning("batch failed; will retry in order", error=repr(exc)[:512],
                        failure=failures.classify(exc).value)
            await self._backoff(exc)
        await self.reload()

    async def _maybe_snapshot(self) -> None:
        if not self._snapshots.due(self.state.position):
            return
        try:
            await self.store.save_snapshot(self.state)
            self._snapshots.saved(self.state.position)
        except Exception as exc:  # a snapshot is an optimisation; try again later
            log.warning("snapshot failed", error=repr(exc))
