"""hypothesis at the message level, through the real consumer (nats-server + PostgreSQL): arbitrary
bytes, and arbitrary JSON shaped like intents (a valid intent with some of its values replaced by
arbitrary JSON: huge numbers, floats, strings, nesting), each published between valid intents.
Every message gets exactly one outcome (one processed-intent row for its stream sequence), the
stream keeps moving (the valid intent after them is decided), and the log verifies."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from collections.abc import Coroutine
from typing import Any

import asyncpg
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.js import JetStreamContext

from events import intents, subjects
from events.values import Resources
from services.allocator.adapters import database
from services.allocator.adapters.postgres import PostgresEventStore
from services.allocator.api.verify import verify
from services.shared import messaging

from .factory import register_node, request
from .harness import start_replica
from .outcomes import wait_decided

pytestmark = pytest.mark.integration

BASES: list[dict[str, Any]] = [
    msgspec.to_builtins(intent) for intent in (
        request("shape", tflops=20),
        register_node("shape-node", gpus=2),
        intents.ReleaseAllocation(intent_id="x", allocation_id="shape"),
        intents.ResizeAllocation(intent_id="x", allocation_id="shape",
                                 request=Resources(milli_tflops=1000, vram_bytes=1 << 30),
                                 limit=Resources(milli_tflops=1000, vram_bytes=1 << 30)),
    )
]

UNIQUE = "\x01unique"
"""Marks an intent id the test replaces by a per-message prefix (an intent id decided before would
rightly get no second outcome)."""

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.floats() | st.text(max_size=30)
    | st.integers(0, 3000).map(lambda n: "n" * n),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def leaf_paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths to every value inside ``doc`` (dict keys and list indexes), the root excluded."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    paths = []
    for key, value in items:
        paths.append((*prefix, key))
        paths.extend(leaf_paths(value, (*prefix, key)))
    return paths


@st.composite
def shaped(draw: st.DrawFn) -> tuple[str, bytes]:
    """(subject, payload): a valid intent document with one to three values replaced."""
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    doc["intent_id"] = ""
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(leaf_paths(doc)))
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = draw(json_values)
    if isinstance(doc.get("intent_id"), str):  # made unique per message when published
        doc["intent_id"] = UNIQUE + doc["intent_id"]
    tag = doc.get("type") if isinstance(doc.get("type"), str) else "request_allocation"
    return subjects.intent_subject(tag[:40] or "x"), json.dumps(doc).encode()


messages = st.one_of(
    st.tuples(st.just(subjects.intent_subject("request_allocation")), st.binary(max_size=200)),
    shaped(),
)


@pytest.fixture
async def pool(database_url: str) -> Any:
    db = await database.create_pool(database_url)
    try:
        yield db
    finally:
        await db.close()


async def test_every_message_gets_exactly_one_outcome_and_the_stream_keeps_moving(
        nats_url: str, database_url: str, jetstream: JetStreamContext, pool: asyncpg.Pool) -> None:
    loop = asyncio.get_running_loop()
    replica = await start_replica(nats_url, database_url=database_url)
    await messaging.publish_intent(jetstream, register_node("n1", gpus=4))
    counter = itertools.count()

    def run(coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=120)

    async def one_round(batch: list[tuple[str, bytes]]) -> None:
        seqs = []
        for subject, payload in batch:
            n = next(counter)
            payload = payload.replace(json.dumps(UNIQUE)[1:-1].encode(), f"u{n}-".encode())
            ack = await jetstream.publish(subject, payload, headers={"Nats-Msg-Id": f"m-{n}"})
            seqs.append(int(ack.seq))
        sentinel = request(f"sentinel-{next(counter)}")
        await messaging.publish_intent(jetstream, sentinel)
        await wait_decided(pool, sentinel.intent_id)
        rows = await pool.fetch("SELECT stream_seq, count(*) FROM processed_intents WHERE stream_seq = "
                                "any($1::bigint[]) GROUP BY stream_seq", seqs)
        assert {int(r[0]): int(r[1]) for r in rows} == dict.fromkeys(seqs, 1), batch

    @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(batch=st.lists(messages, min_size=1, max_size=3))
    def check(batch: list[tuple[str, bytes]]) -> None:
        run(one_round(batch))

    try:
        await asyncio.to_thread(check)
        report = await verify(PostgresEventStore(pool))
        assert report.ok, report.problems
    finally:
        await replica.stop()
