"""Process lifecycle for every service: signals -> an asyncio.Event, supervised tasks, ordered teardown.

``run_service(main)`` runs ``main(stop)`` under ``asyncio.run`` with SIGTERM/SIGINT setting
``stop``; ``supervise`` runs long-lived coroutines in a TaskGroup so that one crashing cancels
the others (and the error surfaces), and ``Teardown`` closes resources in reverse order of
opening, logging (not raising) errors from each closer so every closer runs. ``HeapKeeper``
keeps what the process holds out of the cyclic garbage collector's full collections.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import structlog

from services.shared.settings import SettingsError, nats_security

log = structlog.get_logger(__name__)

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)


class HeapKeeper:
    """Keeps the cyclic garbage collector's full collections as short as what was allocated since
    the last one, for a process that holds a large projection for its whole life.

    CPython's full collection walks every tracked object outside the permanent generation: on the
    4x openb state with 500 requests waiting, ~300,000 objects and ~110 ms, once per ~1,000
    decisions while the pool churns (benchmarks/bench_decide.py ``--keep-heap``), a pause of the writer's
    loop and of every intent waiting on it. :meth:`settle` at start-up collects, then moves every
    survivor to the permanent generation (``gc.freeze``); :meth:`tend`, between batches, does the
    same after each full collection the collector ran on its own (its survivors are live: the
    cyclic garbage among them was just collected), so the next full collection walks only what was
    allocated since, however large the state has grown (``gc.freeze`` came from Instagram's
    start-up heap, CPython bpo-31558; here the freeze follows the heap as it grows).

    Frozen objects are still freed by reference counting; only cyclic garbage among them stays.
    That is bounded: once the permanent generation has grown to :attr:`growth` times its size at
    the last :meth:`settle`, :meth:`tend` settles again (one full walk), so the garbage kept never
    outgrows the live heap, and those full walks happen only as often as the heap grows by that
    factor. Process-global like the collector itself: one keeper per process.
    """

    def __init__(self, *, growth: float = 2.0) -> None:
        if growth <= 1:
            raise ValueError(f"growth must be above 1, got {growth}")
        self.growth = growth
        """Settle again once the permanent generation is this many times its size at the last settle."""
        self.settled = 0
        """Objects in the permanent generation right after the last :meth:`settle`."""
        self.refrozen = 0
        """Objects moved to the permanent generation by :meth:`tend` since (an upper bound: some
        have been freed since)."""
        self.settles = 0
        """How many times :meth:`settle` ran (start-up, reloads, and when the heap had grown)."""
        self._seen = _full_collections()

    def settle(self) -> None:
        """Collect cyclic garbage now (every generation, the permanent one included), then freeze
        every survivor. Call once start-up has built its long-lived objects (the allocator: after
        loading its state)."""
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.settled = gc.get_freeze_count()
        self.refrozen = 0
        self.settles += 1
        self._seen = _full_collections()

    def tend(self) -> bool:
        """After a full collection since the last call: freeze its survivors (or settle again,
        once the heap has grown :attr:`growth`-fold since the last settle); True when it froze.
        O(1) when none ran; else O(the objects that collection walked)."""
        seen = _full_collections()
        if seen == self._seen:
            return False
        self._seen = seen
        self.refrozen += len(gc.get_objects(generation=2))
        gc.freeze()
        if self.settled + self.refrozen >= self.growth * self.settled:  # may have grown: count exactly
            frozen = gc.get_freeze_count()
            if frozen >= self.growth * self.settled:
                self.settle()
            else:
                self.refrozen = frozen - self.settled
        return True


def _full_collections() -> int:
    """How many full (generation 2) collections this process has run."""
    return int(gc.get_stats()[2]["collections"])


def install_stop_signals(stop: asyncio.Event, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Make SIGTERM and SIGINT set ``stop`` (a second signal while stopping is ignored)."""
    loop = loop or asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, _on_signal, stop, sig)


def _on_signal(stop: asyncio.Event, sig: signal.Signals) -> None:
    log.info("stop signal received", signal=sig.name)
    stop.set()


def remove_stop_signals(*, loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Restore default handling of SIGTERM/SIGINT."""
    loop = loop or asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.remove_signal_handler(sig)


class _Stopped(Exception):
    """Raised inside the supervising TaskGroup when ``stop`` is set, to cancel its tasks."""


async def supervise(stop: asyncio.Event, *coros: Coroutine[Any, Any, None]) -> None:
    """Run ``coros`` in a TaskGroup until ``stop`` is set (then cancel them and return).

    One failing cancels the others and its error is raised (in an ExceptionGroup), the
    TaskGroup semantics. Coroutines that return early are simply done.
    """

    async def until_stopped() -> None:
        await stop.wait()
        raise _Stopped

    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(until_stopped())
            for coro in coros:
                group.create_task(coro)
    except* _Stopped:
        pass


class Teardown:
    """Async closers run in reverse order of :meth:`push`; each closer's error is logged, not raised."""

    def __init__(self) -> None:
        self._closers: list[tuple[str, Callable[[], Awaitable[object]]]] = []

    def push(self, name: str, closer: Callable[[], Awaitable[object]]) -> None:
        """Register ``closer`` (run at :meth:`close`, before earlier-registered ones)."""
        self._closers.append((name, closer))

    async def close(self, *, timeout_s: float = 10.0) -> None:
        """Run every closer, newest first, each bounded by ``timeout_s`` seconds."""
        while self._closers:
            name, closer = self._closers.pop()
            try:
                await asyncio.wait_for(closer(), timeout_s)
            except Exception as exc:  # a failing closer must not stop the others
                log.warning("teardown step failed", step=name, error=repr(exc))


def run_service(main: Callable[[asyncio.Event], Coroutine[Any, Any, None]]) -> None:
    """``asyncio.run(main(stop))`` with SIGTERM/SIGINT setting ``stop``; returns when main returns.

    The ``GPULEDGER_NATS_*`` security settings are checked first (every service connects with
    them): a missing file or an inconsistent set prints ``error: ... (field: VAR)`` on stderr and
    exits 2 (SystemExit) before anything starts.
    """
    try:
        nats_security()
    except SettingsError as exc:
        print(f"error: {exc} (field: {exc.field})", file=sys.stderr)
        raise SystemExit(2) from exc

    async def runner() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)
        try:
            await main(stop)
        finally:
            remove_stop_signals()

    asyncio.run(runner())


async def wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` seconds for ``event``; returns whether it is set.

    Uses ``asyncio.timeout`` rather than ``wait_for``: on Python 3.11 ``wait_for`` can swallow a
    cancellation that arrives as the event fires, leaving a task that never stops.
    """
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        pass
    return event.is_set()
