"""Running allocator replicas inside a test (real NATS; in-memory or PostgreSQL stores) and reading
what they published."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import msgspec
from nats.aio.client import Client as NATS

from events import codec, subjects
from events.decisions import AnyEvent
from services.allocator import bootstrap, reader
from services.allocator.adapters.relay import INTENT_HEADER
from services.allocator.loop import batch
from services.allocator.loop.leader import Allocator
from services.allocator.ports import EventStore, History, LeaseStore
from services.allocator.settings import AllocatorSettings

FAST = {"lease_ttl_s": 1.0, "lease_renew_s": 0.2, "heartbeat_check_s": 0.0, "fetch_wait_s": 0.2,
        "retry_delay_s": 0.05, "retry_max_s": 0.5, "tail_interval_s": 0.05, "http_port": 0}


class Replica:
    """One allocator replica running as a task; ``stop()`` ends it cleanly (lease handed over)."""

    def __init__(self, allocator: Allocator, port: int, task: asyncio.Task[None], stop: asyncio.Event) -> None:
        self.allocator = allocator
        self.port = port
        self.task = task
        self._stop = stop

    async def stop(self) -> None:
        self._stop.set()
        done, _ = await asyncio.wait([self.task], timeout=30)
        assert done, "the allocator did not stop within 30 s of its stop event"
        self.task.result()


async def start_replica(nats_url: str, *, store: EventStore | None = None, leases: LeaseStore | None = None,
                        holder: str = "r1", process: batch.Process | None = None, **overrides: Any) -> Replica:
    settings = msgspec.convert({**FAST, "nats_url": nats_url, "holder": holder, **overrides}, AllocatorSettings)
    stop = asyncio.Event()
    ready: asyncio.Future[tuple[Allocator, int]] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(bootstrap.serve(settings, stop, store=store, leases=leases, process=process,
                                               on_ready=lambda a, p: ready.set_result((a, p))))
    done, _ = await asyncio.wait([task, ready], timeout=30, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()
    allocator, port = ready.result()
    await asyncio.wait_for(allocator.loaded.wait(), 30)
    return Replica(allocator, port, task, stop)


class ReaderProcess:
    """One reader (``gpuledger api``) running as a task; ``stop()`` ends it."""

    def __init__(self, running: reader.Reader, port: int, task: asyncio.Task[None], stop: asyncio.Event) -> None:
        self.reader = running
        self.port = port
        self.task = task
        self._stop = stop

    @property
    def position(self) -> int:
        """The last log position the reader's projection applied."""
        return self.reader.follower.state.position

    async def stop(self) -> None:
        self._stop.set()
        done, _ = await asyncio.wait([self.task], timeout=30)
        assert done, "the reader did not stop within 30 s of its stop event"
        self.task.result()


async def start_reader(nats_url: str, *, database_url: str = "", store: EventStore | None = None,
                       history: History | None = None, **overrides: Any) -> ReaderProcess:
    """A reader over ``database_url`` (or the in-memory ``store``/``history``), its projection loaded."""
    settings = msgspec.convert({"nats_url": nats_url, "database_url": database_url, "http_port": 0,
                                "poll_s": 0.02, **overrides}, reader.ReaderSettings)
    stop = asyncio.Event()
    ready: asyncio.Future[tuple[reader.Reader, int]] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(reader.serve_reader(settings, stop, store=store, history=history,
                                                   on_ready=lambda r, p: ready.set_result((r, p))))
    done, _ = await asyncio.wait([task, ready], timeout=30, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()
    running, port = ready.result()
    await asyncio.wait_for(running.follower.loaded.wait(), 30)
    return ReaderProcess(running, port, task, stop)


async def until(condition: Callable[[], bool], *, timeout_s: float = 60.0, what: str = "condition") -> None:
    """Poll ``condition`` until true; fail (not a timing assertion: a liveness bound) after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout_s}s")
        await asyncio.sleep(0.02)


class Published(msgspec.Struct):
    """One message of GPULEDGER_EVENTS: stream seq, msg id (log position), deciding intent id, event."""

    seq: int
    msg_id: str
    intent_id: str
    event: AnyEvent


async def published_events(nc: NATS) -> list[Published]:
    """Every message of GPULEDGER_EVENTS in stream order (read with an ephemeral pull consumer)."""
    js = nc.jetstream()
    info = await js.stream_info(subjects.EVENT_STREAM)
    total = int(info.state.messages or 0)
    if total == 0:
        return []
    sub = await js.pull_subscribe(f"{subjects.EVENT_SUBJECT_PREFIX}.>", stream=subjects.EVENT_STREAM)
    out: list[Published] = []
    try:
        while len(out) < total:
            for msg in await sub.fetch(min(1000, total - len(out)), timeout=5):
                headers = msg.headers or {}
                out.append(Published(seq=int(msg.metadata.sequence.stream), msg_id=headers["Nats-Msg-Id"],
                                     intent_id=headers.get(INTENT_HEADER, ""), event=codec.decode_event(msg.data)))
                await msg.ack()
    finally:
        await sub.unsubscribe()
    return out


async def wait_published(nc: NATS, count: int, *, timeout_s: float = 60.0) -> None:
    """Wait until GPULEDGER_EVENTS holds at least ``count`` messages."""
    js = nc.jetstream()
    deadline = time.monotonic() + timeout_s
    while True:
        info = await js.stream_info(subjects.EVENT_STREAM)
        if int(info.state.messages or 0) >= count:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"only {info.state.messages} of {count} events published in {timeout_s}s")
        await asyncio.sleep(0.05)
