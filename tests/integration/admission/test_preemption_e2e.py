"""Preemption end to end on the real stack: the HTTPS webhook, an allocator replica, the binder and the
in-test API server, over a real nats-server.

A low-QoS pod fills the only GPU; a critical pod arrives, the allocator preempts, the binder evicts the
low pod through the Eviction API and keeps the critical pod gated until the low pod is deleted (as a
kubelet does after the grace period), then lifts the gate. No release is published for the victim.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import jsonpatch
import msgspec
import pytest
from nats.js import JetStreamContext

from events import codec, decisions, intents, subjects
from services.admission.binder import Binder
from services.admission.view import ClusterView
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.podspec import PoolDefaults, keys
from services.shared import kube, messaging
from tests.fixtures.kube_api import KubeApiServer
from tests.integration.service.factory import register_node
from tests.integration.service.harness import published_events, start_replica, until
from tests.unit.admission.builders import a_pod, a_review

from .test_binder_and_watches import _stop, _ungated

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def _admit(webhook: Any, kube_api: KubeApiServer, name: str, qos: str, **annotations: str) -> str:
    """Review the pod through the webhook, apply its JSONPatch and store it, as the API server does;
    returns the allocation id (the review UID: the pod has no UID yet)."""
    pod = a_pod({"tflops-request": "80", "vram-request": "8Gi", "qos": qos, **annotations}, name=name, uid="",
                terminationGracePeriodSeconds=30)
    answer = (await webhook.post(a_review(pod, uid=f"review-{name}")))["response"]
    assert answer["allowed"], answer
    admitted = jsonpatch.apply_patch(pod, msgspec.json.decode(base64.b64decode(answer["patch"])))
    kube_api.create("pods", admitted, namespace="default")
    return str(admitted["metadata"]["labels"][keys.ALLOCATION_ID_LABEL])


def _gpu_ids(kube_api: KubeApiServer, name: str) -> str:
    pod = kube_api.get("pods", name, namespace="default") or {}
    return str(pod.get("metadata", {}).get("annotations", {}).get(keys.GPU_IDS, ""))


@asynccontextmanager
async def _stack(kube_api: KubeApiServer, jetstream: JetStreamContext, nats_url: str,
                 start_webhook: Callable[..., Any], *, gpus: int = 1,
                 **binder: Any) -> AsyncIterator[tuple[Any, InMemoryEventStore]]:
    """The webhook, an allocator replica on an in-memory log with one node of ``gpus`` GPUs (100 TFLOPS,
    16 GiB each), and a running binder against the in-test API server; yields (webhook, the replica's
    log) and stops binder and replica."""
    async def publish(intent: Any) -> int:
        return await messaging.publish_intent(jetstream, intent, timeout=2.0)

    webhook = await start_webhook(publish, view=ClusterView(pool=PoolDefaults(name="default")))
    leases = InMemoryLeaseStore()
    store = InMemoryEventStore(leases)
    replica = await start_replica(nats_url, store=store, leases=leases)
    await publish(register_node("node-1", gpus=gpus, tflops=100, vram_gib=16))
    async with await kube.api_client(url=kube_api.url) as api:
        task = asyncio.create_task(Binder(api, publish=publish, view=ClusterView(), **binder).run(jetstream))
        try:
            yield webhook, store
        finally:
            await _stop(task)
            await replica.stop()


async def test_a_critical_pod_preempts_a_low_one_through_the_eviction_api(
        kube_api: KubeApiServer, jetstream: JetStreamContext, nats_url: str,
        start_webhook: Callable[..., Any]) -> None:
    async with _stack(kube_api, jetstream, nats_url, start_webhook, eviction_retry_s=0.05) as (webhook, store):
        low = await _admit(webhook, kube_api, "low", "low")
        await until(lambda: _ungated(kube_api, "low") is not None, what="the low pod bound")
        critical = await _admit(webhook, kube_api, "critical", "critical")
        await until(lambda: bool(kube_api.evictions.requests), what="the low pod evicted")
        await until(lambda: bool(_gpu_ids(kube_api, "critical")), what="the critical pod pinned")
        assert _ungated(kube_api, "critical") is None  # the low pod still terminates on the GPU
        assert _gpu_ids(kube_api, "critical") == _gpu_ids(kube_api, "low") == "node-1-gpu0"
        kube_api.delete("pods", "low", namespace="default")  # its grace period is over
        await until(lambda: _ungated(kube_api, "critical") is not None, what="the critical pod ungated")
        # a release of the preempted allocation (a binder that had not seen the preemption) is harmless
        release = intents.ReleaseAllocation(intent_id="late-release", allocation_id=low, reason="test")
        await messaging.publish_intent(jetstream, release, timeout=2.0)
        await until(lambda: "late-release" in store.intents, what="the late release decided")
    (namespace, name, body), = kube_api.evictions.requests
    assert (namespace, name, body["kind"], body["apiVersion"]) == ("default", "low", "Eviction", "policy/v1")
    events = [p.event for p in await published_events(jetstream._nc)]
    preempted = [e for e in events if isinstance(e, decisions.AllocationPreempted)]
    assert [(e.allocation_id, e.preemptor) for e in preempted] == [(low, critical)]
    grant = next(e for e in events if isinstance(e, decisions.AllocationGranted) and e.spec.allocation_id == critical)
    assert grant.preempted == (low,) and grant.spec.qos == "critical"
    info = await jetstream.stream_info(subjects.INTENT_STREAM)
    sent = [codec.decode_intent((await jetstream.get_msg(subjects.INTENT_STREAM, seq)).data)
            for seq in range(1, info.state.last_seq + 1)]
    assert [i.intent_id for i in sent if isinstance(i, intents.ReleaseAllocation)] == ["late-release"]
    late = [row for row in store.rows if row.intent_id == "late-release"]
    assert [row.type for row in late] == ["intent_rejected"] and b"not live" in late[0].data


async def test_an_eviction_protected_pod_is_not_preempted(
        kube_api: KubeApiServer, jetstream: JetStreamContext, nats_url: str,
        start_webhook: Callable[..., Any]) -> None:
    async with _stack(kube_api, jetstream, nats_url, start_webhook) as (webhook, store):
        await _admit(webhook, kube_api, "low", "low", **{"eviction-protection": "1h"})
        await until(lambda: _ungated(kube_api, "low") is not None, what="the low pod bound")
        critical = await _admit(webhook, kube_api, "critical", "critical")
        await until(lambda: f"admit-{critical}" in store.intents, what="the critical request decided")
    decided = [row.type for row in store.rows if row.intent_id == f"admit-{critical}"]
    assert decided == ["allocation_queued"] and not kube_api.evictions.requests
    assert _ungated(kube_api, "critical") is None
