"""Process lifecycle for every service: signals -> an asyncio.Event, supervised tasks, ordered teardown.

``run_service(main)`` runs ``main(stop)`` under ``asyncio.run`` with SIGTERM/SIGINT setting
``stop``; ``supervise`` runs long-lived coroutines in a TaskGroup so that one crashing cancels
the others (and the error surfaces), and ``Teardown`` closes resources in reverse order of
opening, logging (not raising) errors from each closer so every closer runs. ``settle_heap``
takes what start-up built out of the cyclic garbage collector's full collections.
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


def settle_heap() -> None:
    """Collect cyclic garbage now, then move every surviving object to the permanent generation
    (``gc.freeze``), so full collections stop walking the modules and the loaded state.

    Call once start-up has built its long-lived objects (the allocator: after loading its state).
    Frozen objects are still freed by reference counting; only cyclic garbage among them would
    stay, hence the collection first. On the openb state a full collection walks ~137,000 objects
    and pauses the event loop ~65 ms (benchmarks/bench_log.py); afterwards it walks only what was
    allocated since.
    """
    gc.collect()
    gc.freeze()


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
