"""A real allocator (PostgreSQL + nats-server), a reader serving the HTTP API, and a client for it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from nats.js import JetStreamContext

from events import intents
from services.shared import messaging
from tests.integration.service.harness import ReaderProcess, Replica, start_reader, start_replica, until

pytestmark = pytest.mark.integration


def pod(name: str, *, namespace: str = "team-a", tflops: str = "10", vram: str = "1Gi", pool: str = "",
        qos: str = "", labelled: bool = True, kind: str = "Pod") -> dict[str, Any]:
    """A TensorFusion Pod manifest asking ``tflops``/``vram`` per GPU."""
    annotations = {"tensor-fusion.ai/tflops-request": tflops, "tensor-fusion.ai/vram-request": vram}
    if pool:
        annotations["tensor-fusion.ai/gpupool"] = pool
    if qos:
        annotations["tensor-fusion.ai/qos"] = qos
    labels = {"tensor-fusion.ai/enabled": "true"} if labelled else {}
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": namespace,
                                                          "labels": labels, "annotations": annotations},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}


class Api:
    """An HTTP client of one reader (``base``; the writer's probes at ``writer_base``):
    ``get``/``send`` return (status, JSON body)."""

    def __init__(self, session: aiohttp.ClientSession, replica: Replica, reader: ReaderProcess,
                 js: JetStreamContext) -> None:
        self.session = session
        self.replica = replica
        self.reader = reader
        self.js = js
        self.base = f"http://127.0.0.1:{reader.port}"
        self.writer_base = f"http://127.0.0.1:{replica.port}"

    async def get(self, path: str, **params: Any) -> tuple[int, Any]:
        async with self.session.get(self.base + path, params=params) as r:
            return r.status, await r.json(content_type=None)

    async def send(self, method: str, path: str, body: Any = None, *, data: bytes | str | None = None,
                   headers: dict[str, str] | None = None, **params: Any) -> tuple[int, Any]:
        async with self.session.request(method, self.base + path, json=body, data=data, params=params,
                                        headers=headers) as r:
            return r.status, await r.json(content_type=None)

    async def publish(self, *items: intents.AnyIntent) -> None:
        """Publish intents and wait until the allocator decided all of them and the reader applied them."""
        for intent in items:
            await messaging.publish_intent(self.js, intent)
        ids = {i.intent_id for i in items}
        store = self.replica.allocator.store
        for _ in range(1200):
            if ids <= await store.processed(sorted(ids)):  # the projection was evolved before the append
                await self.caught_up()
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"intents {sorted(ids)} not decided within 60 s")

    async def caught_up(self) -> None:
        """Wait until the reader applied every event the log holds now."""
        head = await self.replica.allocator.store.last_position()
        await until(lambda: self.reader.position >= head, what=f"the reader at position {head}")

    async def all_pages(self, path: str, **params: Any) -> list[Any]:
        """Every item of a list endpoint, following ``continue``."""
        items: list[Any] = []
        token = None
        while True:
            query = {**params, **({"continue": token} if token else {})}
            status, body = await self.get(path, **query)
            assert status == 200, body
            items.extend(body["items"])
            token = body["continue"]
            if token is None:
                return items


@pytest.fixture
async def replica(nats_url: str, database_url: str, jetstream: JetStreamContext) -> AsyncIterator[Replica]:
    running = await start_replica(nats_url, database_url=database_url)
    await until(lambda: running.allocator.keeper.is_leader, what="leadership")
    yield running
    await running.stop()


@pytest.fixture
async def reader(replica: Replica, nats_url: str, database_url: str) -> AsyncIterator[ReaderProcess]:
    running = await start_reader(nats_url, database_url=database_url)
    yield running
    await running.stop()


@pytest.fixture
async def api(replica: Replica, reader: ReaderProcess, jetstream: JetStreamContext) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(session, replica, reader, jetstream)
