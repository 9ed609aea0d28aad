"""Request bodies parse at a bounded cost and never on the event loop when large (api/bounds.BodyParser).

The worker is a real child process (``python -m services.allocator.api.parse_worker``): a large
YAML body is parsed there while the loop keeps running; a refusal inside the worker keeps its
status and field; a parse past the time bound is 413 and the worker is killed and replaced; too
many waiting bodies are 503. No timing is asserted beyond "the loop ran while the worker parsed".
"""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from services.allocator.api import bounds
from services.allocator.api.bounds import ApiError, BodyParser

pytestmark = pytest.mark.integration


def _yaml_of(size: int) -> str:
    lines = ["apiVersion: v1", "kind: Pod", "metadata:", "  name: big", "  annotations:"]
    total, i = sum(len(line) + 1 for line in lines), 0
    while total < size:
        lines.append(f"    key{i}: value-{i}")
        total += len(lines[-1]) + 1
        i += 1
    return "\n".join(lines)


async def test_a_large_yaml_parses_in_the_worker_while_the_loop_keeps_ticking() -> None:
    parser = BodyParser()
    await parser.warm()
    ticks: list[float] = []

    async def tick() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.005)

    ticker = asyncio.create_task(tick())
    try:
        started = time.monotonic()
        document = await parser.parse(_yaml_of(192 << 10))
        took = time.monotonic() - started
    finally:
        ticker.cancel()
        await parser.aclose()
    assert document["metadata"]["name"] == "big" and len(document["metadata"]["annotations"]) > 5_000
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    # the loop ran all along: it ticked throughout, and no pause came near the parse's length
    assert len(ticks) > 5 and max(gaps) < took / 2, (len(ticks), max(gaps), took)


async def test_a_refusal_in_the_worker_keeps_its_status_and_field_and_small_bodies_parse_in_place() -> None:
    parser = BodyParser()
    try:
        deep = "[" * (bounds.MAX_DEPTH + 1) + "]" * (bounds.MAX_DEPTH + 1) + " " * bounds.INLINE_BYTES
        with pytest.raises(ApiError) as refused:
            await parser.parse(deep)
        assert (refused.value.status, refused.value.field) == (400, "body")
        assert "nested deeper" in refused.value.message
        assert parser.worker is not None  # the large one went to the worker
        bomb = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x]"]
                         + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
                         + ["metadata: *i", "#" + " " * bounds.INLINE_BYTES])
        with pytest.raises(ApiError) as exploded:
            await parser.parse(bomb)
        assert exploded.value.status == 400 and "values" in exploded.value.message
        small = BodyParser()
        assert await small.parse('{"kind": "Pod"}') == {"kind": "Pod"}
        assert small.worker is None  # parsed in place: no worker started
    finally:
        await parser.aclose()


async def test_a_parse_past_its_time_is_413_and_the_worker_is_replaced_and_too_many_waiting_is_503() -> None:
    parser = BodyParser(timeout_s=30, max_waiting=1)
    try:
        await parser.warm()
        first = parser.worker
        parser.timeout_s = 0.01
        with pytest.raises(ApiError) as slow:
            await parser.parse(_yaml_of(512 << 10))
        assert slow.value.status == 413 and slow.value.field == "body"
        assert first is not None and await asyncio.wait_for(first.wait(), 10) != 0  # killed
        parser.timeout_s = 30
        body = _yaml_of(32 << 10)
        parsing, waiting = asyncio.create_task(parser.parse(body)), asyncio.create_task(parser.parse(body))
        await asyncio.sleep(0.01)  # one holds the worker, one waits for it
        with pytest.raises(ApiError) as busy:
            await parser.parse(body)
        assert busy.value.status == 503
        assert (await parsing)["kind"] == (await waiting)["kind"] == "Pod"  # a new worker served them
        assert parser.worker is not None and parser.worker is not first
    finally:
        await parser.aclose()
