"""The in-test API server speaks real REST to kubernetes-asyncio; watch_objects resumes and re-lists."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.shared import kube
from tests.fixtures.kube_api import KubeApiServer

pytestmark = pytest.mark.timeout(30)


async def _collect(events: AsyncIterator[kube.WatchEvent], queue: asyncio.Queue[kube.WatchEvent]) -> None:
    async for event in events:
        await queue.put(event)


async def _next_of(queue: asyncio.Queue[kube.WatchEvent], kind: str) -> kube.WatchEvent:
    async with asyncio.timeout(10):
        while (event := await queue.get()).type != kind:
            pass
    return event


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _pod(name: str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


async def test_core_and_custom_resources_round_trip(kube_api: KubeApiServer) -> None:
    async with await kube.api_client(url=kube_api.url) as api:
        core = client.CoreV1Api(api)
        kube_api.add_node("n1", labels={"gpu": "yes"})
        kube_api.add_node("n2")
        nodes = await core.list_node(label_selector="gpu=yes")
        assert [n.metadata.name for n in nodes.items] == ["n1"]
        pod = await core.create_namespaced_pod("team", client.V1Pod(**_pod("p1")))
        assert pod.metadata.namespace == "team" and pod.metadata.uid
        await core.patch_namespaced_pod("p1", "team", {"metadata": {"annotations": {"a": "1"}}})
        await core.patch_namespaced_pod(
            "p1", "team", [{"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}],
            _content_type="application/json-patch+json")
        stored = await core.read_namespaced_pod("p1", "team")
        assert stored.metadata.annotations == {"a": "1"} and stored.metadata.labels == {"x": "y"}
        custom = client.CustomObjectsApi(api)
        body = {"apiVersion": "tensor-fusion.ai/v1", "kind": "WorkloadProfile",
                "metadata": {"name": "wp"}, "spec": {"qos": "high"}}
        where = ("tensor-fusion.ai", "v1", "team", "workloadprofiles")
        await custom.create_namespaced_custom_object(*where, body)
        got = await custom.get_namespaced_custom_object(*where, "wp")
        assert got["spec"] == {"qos": "high"}
        await core.delete_namespaced_pod("p1", "team")
        with pytest.raises(ApiException) as missing:
            await core.read_namespaced_pod("p1", "team")
        assert missing.value.status == 404


async def test_kubeconfig_file_reaches_the_server(kube_api: KubeApiServer, tmp_path: Path) -> None:
    kube_api.add_node("n1")
    path = kube_api.write_kubeconfig(tmp_path / "config")
    async with await kube.api_client(kubeconfig=str(path)) as api:
        nodes = await client.CoreV1Api(api).list_node()
    assert [n.metadata.name for n in nodes.items] == ["n1"]
    assert ("GET", "/api/v1/nodes", {}) in kube_api.requests


async def test_watch_resumes_from_last_resource_version_after_stream_ends(kube_api: KubeApiServer) -> None:
    kube_api.add_node("n1")
    queue: asyncio.Queue[kube.WatchEvent] = asyncio.Queue()
    async with await kube.api_client(url=kube_api.url) as api:
        task = asyncio.create_task(_collect(kube.watch_objects(client.CoreV1Api(api).list_node), queue))
        assert (await _next_of(queue, "ADDED")).object["metadata"]["name"] == "n1"
        await kube_api.wait_watching("nodes")
        kube_api.end_watches()
        kube_api.add_node("n2")  # happens while no watch is open: must be replayed on resume
        assert (await _next_of(queue, "ADDED")).object["metadata"]["name"] == "n2"
        kube_api.patch("nodes", "n1", {"spec": {"unschedulable": True}})
        assert (await _next_of(queue, "MODIFIED")).object["spec"]["unschedulable"] is True
        await _stop(task)
    calls = [q for m, p, q in kube_api.requests if p == "/api/v1/nodes"]
    watches = [q for q in calls if q.get("watch", "").lower() == "true"]
    assert len(calls) - len(watches) == 1, "resumed without re-listing"
    assert len(watches) >= 2 and watches[1]["resourceVersion"] == watches[0]["resourceVersion"] != ""


async def test_watch_relists_on_410_and_reports_objects_deleted_meanwhile(kube_api: KubeApiServer) -> None:
    kube_api.add_node("n1")
    kube_api.add_node("n2")
    queue: asyncio.Queue[kube.WatchEvent] = asyncio.Queue()
    async with await kube.api_client(url=kube_api.url) as api:
        task = asyncio.create_task(_collect(kube.watch_objects(client.CoreV1Api(api).list_node), queue))
        await _next_of(queue, kube.SYNCED)
        await kube_api.wait_watching("nodes")
        kube_api.fail_next("GET", "/api/v1/nodes", status=500)  # the resume attempt fails once
        kube_api.delete("nodes", "n2")
        kube_api.expire()
        assert (await _next_of(queue, "DELETED")).object["metadata"]["name"] == "n2"
        await _next_of(queue, kube.SYNCED)
        await _stop(task)
    lists = [q for m, p, q in kube_api.requests if p == "/api/v1/nodes" and "watch" not in q]
    assert len(lists) >= 2


async def test_watch_of_custom_objects_in_a_namespace(kube_api: KubeApiServer) -> None:
    queue: asyncio.Queue[kube.WatchEvent] = asyncio.Queue()
    async with await kube.api_client(url=kube_api.url) as api:
        custom = client.CustomObjectsApi(api)
        list_fn = functools.partial(custom.list_namespaced_custom_object,
                                    "tensor-fusion.ai", "v1", "team", "gpuresourcequotas")
        task = asyncio.create_task(_collect(kube.watch_objects(list_fn, retry_delay_s=0.05), queue))
        await _next_of(queue, kube.SYNCED)
        await kube_api.wait_watching("gpuresourcequotas")
        kube_api.create("gpuresourcequotas", {"metadata": {"name": "q"}, "spec": {}}, namespace="other")
        kube_api.create("gpuresourcequotas", {"metadata": {"name": "q"}, "spec": {"a": 1}}, namespace="team")
        event = await _next_of(queue, "ADDED")
        assert event.object["metadata"]["namespace"] == "team"
        await _stop(task)


async def test_too_old_resource_version_gets_an_error_event(kube_api: KubeApiServer) -> None:
    kube_api.add_node("n1")
    kube_api.expire()
    async with await kube.api_client(url=kube_api.url) as api:
        response = await client.CoreV1Api(api).list_node(watch=True, resource_version="1",
                                                         _preload_content=False)
        line = await response.content.readline()
    assert b'"code":410' in line and b'"type":"ERROR"' in line


async def test_no_configuration_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(kube.KubeConfigError, match="kubeconfig"):
        await kube.api_client()
