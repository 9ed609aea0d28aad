"""Property: whatever mix of changes, dropped streams and 410 Gone, watch_objects converges to the server."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kubernetes_asyncio import client

from services.shared import kube
from tests.fixtures.kube_api import KubeApiServer

pytestmark = pytest.mark.timeout(120)

NAMES = st.sampled_from(["n0", "n1", "n2", "n3"])
OPS = st.lists(st.one_of(
    st.tuples(st.just("apply"), NAMES, st.integers(0, 3)),
    st.tuples(st.just("delete"), NAMES, st.just(0)),
    st.tuples(st.just("drop"), st.just(""), st.just(0)),
    st.tuples(st.just("expire"), st.just(""), st.just(0)),
    st.tuples(st.just("offline"), NAMES, st.integers(-1, 3)),  # change while disconnected, then 410
), min_size=1, max_size=25)


async def _follow(events: Any, view: dict[str, str], synced: asyncio.Event) -> None:
    async for event in events:
        name = event.object.get("metadata", {}).get("name", "")
        if event.type == kube.SYNCED:
            synced.set()
        elif event.type == "DELETED":
            view.pop(name, None)
        else:
            view[name] = event.object["metadata"]["labels"]["v"]


async def _converged(server: KubeApiServer, view: dict[str, str]) -> None:
    expected = {n["metadata"]["name"]: n["metadata"]["labels"]["v"] for n in server.list("nodes")}
    async with asyncio.timeout(20):
        while view != expected:
            await asyncio.sleep(0.01)


async def _scenario(ops: list[tuple[str, str, int]]) -> None:
    server = KubeApiServer()
    await server.start()
    view: dict[str, str] = {}
    synced = asyncio.Event()
    try:
        async with await kube.api_client(url=server.url) as api:
            watch = kube.watch_objects(client.CoreV1Api(api).list_node, retry_delay_s=0.01)
            task = asyncio.create_task(_follow(watch, view, synced))
            await asyncio.wait_for(synced.wait(), 20)
            await server.wait_watching("nodes")
            for op, name, value in ops:
                if op == "apply":
                    server.add_node(name, labels={"v": str(value)})
                elif op == "delete" and server.get("nodes", name) is not None:
                    server.delete("nodes", name)
                elif op == "drop":
                    server.end_watches()
                elif op == "expire":
                    server.expire()
                elif op == "offline":  # once the watcher is caught up, change things behind its back
                    await _converged(server, view)
                    await server.wait_watching("nodes")
                    server.end_watches()
                    if value >= 0:
                        server.add_node(name, labels={"v": str(value)})
                    elif server.get("nodes", name) is not None:
                        server.delete("nodes", name)
                    server.expire()
                await asyncio.sleep(0)
            await _converged(server, view)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        await server.stop()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
@example([("apply", "n0", 1), ("offline", "n0", -1)])  # deleted while disconnected, then compacted
def test_watch_view_converges_to_the_server_state(ops: list[tuple[str, str, int]]) -> None:
    asyncio.run(_scenario(ops))
