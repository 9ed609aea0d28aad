"""Readers cannot stall the writer: the writer and a reader as real processes (issue 27 item 3).

A storm of dashboard pages, simulate (small Pods and 1 MiB YAML bodies), why and the queue hits
the reader while intents stream into the writer. The writer's ``/readyz`` is watched all along:
its epoch never moves and it stays leader; every intent is decided; the reader answered small
requests while the large bodies were being parsed, and it ends caught up with the log. No timing
is asserted (speed lives in benchmarks/bench_readload.py).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import pytest
from nats.js import JetStreamContext

from services.allocator.adapters import database
from services.allocator.adapters.postgres import PostgresEventStore
from services.shared import messaging

from .factory import register_node, request
from .processes import AllocatorProcess, wait_ready

pytestmark = pytest.mark.integration

STORM_S = 8.0
YAML = {"Content-Type": "application/yaml"}
SMALL_POD = """apiVersion: v1
kind: Pod
metadata:
  name: sim
  namespace: team-a
  annotations: {tensor-fusion.ai/tflops-request: "10", tensor-fusion.ai/vram-request: 1Gi}
spec: {containers: [{name: main}]}
"""


def big_yaml(size: int = 1_040_000) -> bytes:
    """A 1 MiB YAML Pod (many annotations): seconds of PyYAML, as the issue's trial sent."""
    lines = [*SMALL_POD.splitlines()[:5], "  labels:"]
    total, i = sum(len(line) + 1 for line in lines), 0
    while total < size:
        lines.append(f"    k{i}: v{i}")
        total += len(lines[-1]) + 1
        i += 1
    return "\n".join(lines).encode()


async def test_a_read_storm_moves_no_epoch_and_every_intent_is_decided(
        nats_url: str, database_url: str, jetstream: JetStreamContext, tmp_path: Path) -> None:
    writer = AllocatorProcess("w", nats_url=nats_url, database_url=database_url, log_dir=tmp_path)
    reader = AllocatorProcess("r", nats_url=nats_url, database_url=database_url, log_dir=tmp_path,
                              module="services.allocator.reader", GPULEDGER_POLL_S="0.05")
    pool = await database.create_pool(database_url, max_size=2)
    try:
        (ready,) = await asyncio.to_thread(wait_ready, writer)
        await asyncio.to_thread(wait_ready, reader)
        deadline = time.monotonic() + 30
        while ready["role"] != "leader" and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            ready = await asyncio.to_thread(writer.get, "/readyz")
        assert ready["role"] == "leader", ready
        epoch = ready["epoch"]
        for n in range(8):
            await messaging.publish_intent(jetstream, register_node(f"n{n}", gpus=4))
        results = await _storm(writer, reader, jetstream)
        assert results["epochs"] == {epoch} and results["roles"] == {"leader"}, results
        assert results["small_ok"] > 0 and results["big"] > 0, results
        assert results["small_during_big"] > 0, results  # answered while a 1 MiB body was being parsed
        store = PostgresEventStore(pool)
        ids = results["intent_ids"]
        for _ in range(600):
            if len(await store.processed(ids)) == len(ids):
                break
            await asyncio.sleep(0.1)
        assert len(await store.processed(ids)) == len(ids), "not every intent was decided"
        head = await store.last_position()
        for _ in range(300):
            if (await asyncio.to_thread(reader.get, "/readyz"))["position"] >= head:
                break
            await asyncio.sleep(0.1)
        assert (await asyncio.to_thread(reader.get, "/readyz"))["position"] >= head
        assert (await asyncio.to_thread(writer.get, "/readyz"))["epoch"] == epoch
    finally:
        await pool.close()
        codes = (reader.terminate(), writer.terminate())
    assert codes == (0, 0), (reader.log_text()[-3000:], writer.log_text()[-3000:])


async def _storm(writer: AllocatorProcess, reader: AllocatorProcess,
                 js: JetStreamContext) -> dict[str, object]:
    base, probe = f"http://127.0.0.1:{reader.port}", f"http://127.0.0.1:{writer.port}/readyz"
    end = time.monotonic() + STORM_S
    epochs: set[int] = set()
    roles: set[str] = set()
    counts = {"small_ok": 0, "big": 0, "small_during_big": 0}
    big_in_flight = 0
    intent_ids: list[str] = []
    body = big_yaml()

    async def watch(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < end + 1:
            async with session.get(probe) as r:
                doc = await r.json()
                epochs.add(doc["epoch"])
                roles.add(doc["role"])
            await asyncio.sleep(0.1)

    async def small(session: aiohttp.ClientSession, path: str) -> None:
        while time.monotonic() < end:
            if path == "/api/v1/simulate":
                response = session.post(base + path, data=SMALL_POD, headers=YAML)
            else:
                response = session.get(base + path)
            async with response as r:
                await r.read()
                assert r.status < 500, (path, r.status)
                counts["small_ok"] += 1
                counts["small_during_big"] += 1 if big_in_flight else 0

    async def big(session: aiohttp.ClientSession) -> None:
        nonlocal big_in_flight
        while time.monotonic() < end:
            big_in_flight += 1
            try:
                async with session.post(base + "/api/v1/simulate", data=body, headers=YAML) as r:
                    await r.read()
                    assert r.status in (200, 400, 413, 503), r.status
                    counts["big"] += 1
            finally:
                big_in_flight -= 1

    async def intents() -> None:
        i = 0
        while time.monotonic() < end:
            intent = request(f"s{i}", tflops=30)
            await messaging.publish_intent(js, intent)
            intent_ids.append(intent.intent_id)
            i += 1
            await asyncio.sleep(0.02)

    paths = ["/ui/", "/ui/quality", "/ui/queue", "/api/v1/queue", "/api/v1/simulate",
             "/api/v1/allocations/team-a%2Fs1", "/api/v1/status"]
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(watch(session), intents(), big(session), big(session),
                             *(small(session, p) for p in paths))
    return {**counts, "epochs": epochs, "roles": roles, "intent_ids": intent_ids}
