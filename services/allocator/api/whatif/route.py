"""``POST /api/v1/whatif`` on a reader: the what-if replay of docs/whatif.md over the log.

Body (JSON, every field optional): ``since`` (default ``"1h"``) and ``until`` (a duration ago or an
ISO time), ``pool``, ``strategy`` (a name or a list: one alternative each), ``preemption``,
``quota`` (a list of ``NS=TFLOPS[,VRAM]``), ``nodes`` (a list of ``+N:MODEL`` / ``-NAME``). Answers
the report (``WhatIfReport``, as ``gpuledger whatif --json``).

Bounded so the reader keeps serving: the events are read from the log in chunks and each chunk is
replayed in a worker thread (the event loop never runs a replay step); one what-if at a time per
reader (429 while one runs); at most :data:`MAX_INTENTS` intents (422: narrow the window or use the
CLI, which has no bound) and :data:`DEADLINE_S` seconds (503). Nothing is written or published.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
from aiohttp import web

from services.allocator.api import bodies, bounds, paging
from services.allocator.api.bounds import ApiError
from services.allocator.api.context import follower_of
from services.allocator.api.whatif import changes
from services.allocator.api.whatif.engine import Replay, WindowTooLarge, whatif

MAX_INTENTS = 50_000
"""Most intents one API what-if replays (``gpuledger whatif`` on the CLI has no bound)."""

DEADLINE_S = 120.0
"""Most seconds one API what-if may take; checked after each chunk."""

FIELDS = ("since", "until", "pool", "strategy", "preemption", "quota", "nodes")


class _TooSlow(RuntimeError):
    """The deadline passed."""


def _strings(body: dict[str, Any], key: str) -> list[str]:
    raw = body.get(key)
    if raw is None:
        return []
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items) or len(items) > changes.MAX_CHANGES:
        raise ApiError(400, f"{key} must be a string or a list of at most {changes.MAX_CHANGES} strings", field=key)
    return items


def _string(body: dict[str, Any], key: str) -> str | None:
    raw = body.get(key)
    if raw is not None and not isinstance(raw, str):
        raise ApiError(400, f"{key} must be a string, got {type(raw).__name__}", field=key)
    return raw


def parse(body: dict[str, Any], now: datetime) -> Replay:
    """The Replay the body asks for; raises ApiError 400 naming the field."""
    bodies.only(body, FIELDS, field="body")
    try:
        since = changes.moment(_string(body, "since") or "1h", field="since", now=now)
        until_text = _string(body, "until")
        until = changes.moment(until_text, field="until", now=now) if until_text is not None else None
        pool = _string(body, "pool")
        if pool is not None:
            pool = bodies.pool_name(pool)
        alternatives = changes.alternatives(strategies=_strings(body, "strategy"),
                                            preemption_scope=_string(body, "preemption"),
                                            quotas=_strings(body, "quota"), node_changes=_strings(body, "nodes"))
    except changes.ChangeError as exc:
        raise ApiError(400, str(exc), field=exc.field) from None
    if until is not None and until <= since:
        raise ApiError(400, "until must be after since", field="until")
    return Replay(since=since, until=until, pool=pool, alternatives=alternatives, max_intents=MAX_INTENTS)


class WhatIfRoute:
    """The handler with its one-at-a-time guard (one instance in ``http.ROUTES``: one per reader process)."""

    def __init__(self) -> None:
        self.running = False

    async def handle(self, request: web.Request) -> web.Response:
        """POST /api/v1/whatif (module docstring)."""
        paging.query(request, allowed=())
        replay = parse(await bounds.read_object(request), datetime.now(UTC))
        if self.running:
            raise ApiError(429, "a what-if replay is already running on this reader; retry when it ends", field="")
        self.running = True
        deadline = time.monotonic() + DEADLINE_S

        async def in_thread(step: Callable[[], None]) -> None:
            if time.monotonic() > deadline:
                raise _TooSlow
            await asyncio.to_thread(step)

        try:
            report = await whatif(follower_of(request).store, replay, run_sync=in_thread)
        except changes.ChangeError as exc:
            raise ApiError(400, str(exc), field=exc.field) from None
        except WindowTooLarge as exc:
            raise ApiError(422, f"{exc}, or use `gpuledger whatif`", field="since") from None
        except _TooSlow:
            raise ApiError(503, f"the replay took over {DEADLINE_S:.0f} s: narrow the window or use "
                                "`gpuledger whatif`", field="since") from None
        finally:
            self.running = False
        return web.json_response(text=msgspec.json.encode(report).decode())
