"""A defrag campaign end to end on the real stack: the HTTPS webhook, an allocator replica, the binder
and the in-test API server, over a real nats-server.

Two nodes of one GPU each hold a Deployment's pod (node-1) and another pod (node-2); the pool packs; a
campaign reserves the Deployment pod's target on node-2, the binder evicts the pod through the
Eviction API, the ReplicaSet's replacement pod is admitted and granted the reserved GPU, the evicted
pod's deletion releases node-1, which shows idle. A PodDisruptionBudget that refuses the eviction
(429) cancels the move instead and frees its reservation.
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

from events import intents
from events.values import PoolConfig
from services.admission.binder import Binder
from services.admission.evict import MOVED_ANNOTATION
from services.admission.view import ClusterView
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.podspec import PoolDefaults, keys
from services.shared import kube, messaging
from tests.fixtures.kube_api import KubeApiServer
from tests.integration.service.factory import register_node
from tests.integration.service.harness import Replica, start_replica, until
from tests.unit.admission.builders import a_pod, a_review

from .test_binder_and_watches import _stop, _ungated

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

HASH = "5d9c7b"


async def _admit(webhook: Any, kube_api: KubeApiServer, name: str, tflops: str, *, deployment: bool) -> str:
    """Review the pod (of Deployment ``web`` through ReplicaSet ``web-<hash>`` when ``deployment``) through
    the webhook, apply its JSONPatch and store it; returns its allocation id."""
    owner = ("ReplicaSet", f"web-{HASH}") if deployment else None
    labels = {"pod-template-hash": HASH} if deployment else {}
    pod = a_pod({"tflops-request": tflops, "vram-request": "2Gi"}, name=name, uid="", owner=owner, labels=labels,
                terminationGracePeriodSeconds=30)
    answer = (await webhook.post(a_review(pod, uid=f"review-{name}")))["response"]
    assert answer["allowed"], answer
    admitted = jsonpatch.apply_patch(pod, msgspec.json.decode(base64.b64decode(answer["patch"])))
    kube_api.create("pods", admitted, namespace="default")
    return str(admitted["metadata"]["labels"][keys.ALLOCATION_ID_LABEL])


@asynccontextmanager
async def _stack(kube_api: KubeApiServer, jetstream: JetStreamContext, nats_url: str,
                 start_webhook: Callable[..., Any]) -> AsyncIterator[tuple[Any, Replica, Any]]:
    """The webhook, an allocator replica (two 1-GPU nodes, pool spreading) and a running binder; yields
    (webhook, replica, publish)."""
    async def publish(intent: Any) -> int:
        return await messaging.publish_intent(jetstream, intent, timeout=2.0)

    webhook = await start_webhook(publish, view=ClusterView(pool=PoolDefaults(name="default")))
    leases = InMemoryLeaseStore()
    replica = await start_replica(nats_url, store=InMemoryEventStore(leases), leases=leases)
    await publish(intents.ConfigurePool(intent_id="spread", pool="default",
                                        config=PoolConfig(placement="low-load-first")))
    for node in ("node-1", "node-2"):
        await publish(register_node(node, gpus=1, tflops=100, vram_gib=16))
    async with await kube.api_client(url=kube_api.url) as api:
        task = asyncio.create_task(Binder(api, publish=publish, view=ClusterView(), eviction_retry_s=0.05)
                                   .run(jetstream))
        try:
            yield webhook, replica, publish
        finally:
            await _stop(task)
            await replica.stop()


async def _two_busy_nodes(webhook: Any, kube_api: KubeApiServer, replica: Replica, publish: Any) -> str:
    web = await _admit(webhook, kube_api, f"web-{HASH}-a", "30", deployment=True)
    await until(lambda: web in replica.allocator.state.allocations, what="the Deployment's pod granted")
    await _admit(webhook, kube_api, "other", "40", deployment=False)
    await until(lambda: all(n.workers for n in replica.allocator.state.nodes.values()), what="both nodes busy")
    assert replica.allocator.state.allocations[web].node == "node-1"
    assert replica.allocator.state.allocations[web].spec.workload == "web"
    await publish(intents.ConfigurePool(intent_id="pack", pool="default", config=PoolConfig()))
    await until(lambda: replica.allocator.state.pools["default"].placement != "low-load-first", what="packing")
    return web


async def test_an_evicted_deployment_pod_is_replaced_on_the_reserved_gpu(
        kube_api: KubeApiServer, jetstream: JetStreamContext, nats_url: str,
        start_webhook: Callable[..., Any]) -> None:
    async with _stack(kube_api, jetstream, nats_url, start_webhook) as (webhook, replica, publish):
        state = replica.allocator.state
        web = await _two_busy_nodes(webhook, kube_api, replica, publish)
        await publish(intents.StartDefrag(intent_id="campaign-1", pool="default", max_moves=1, max_duration_s=120))
        await until(lambda: bool(kube_api.evictions.requests), what="the Deployment's pod evicted")
        assert kube_api.evictions.requests[0][1] == f"web-{HASH}-a"
        source = kube_api.get("pods", f"web-{HASH}-a", namespace="default") or {}
        assert "campaign-1" in source["metadata"]["annotations"][MOVED_ANNOTATION]
        assert state.gpus["node-2-gpu0"].used_milli_tflops == 70_000  # 40 granted + 30 reserved

        replacement = await _admit(webhook, kube_api, f"web-{HASH}-b", "30", deployment=True)  # the ReplicaSet's
        await until(lambda: _ungated(kube_api, f"web-{HASH}-b") is not None, what="the replacement bound")
        assert (state.allocations[replacement].node, state.allocations[replacement].gpus) == ("node-2",
                                                                                               ["node-2-gpu0"])
        kube_api.delete("pods", f"web-{HASH}-a", namespace="default")  # its grace period is over
        await until(lambda: web not in state.allocations, what="the evicted pod's allocation released")
        assert state.nodes["node-1"].idle_since is not None and not state.nodes["node-1"].workers
        campaign = state.campaigns["default"]
        assert not campaign.running and campaign.completed == 1 and campaign.end_code == "done"
        assert state.gpus["node-2-gpu0"].used_milli_tflops == 70_000  # the reservation became the grant


async def test_a_disruption_budget_refusal_cancels_the_move_and_frees_its_reservation(
        kube_api: KubeApiServer, jetstream: JetStreamContext, nats_url: str,
        start_webhook: Callable[..., Any]) -> None:
    async with _stack(kube_api, jetstream, nats_url, start_webhook) as (webhook, replica, publish):
        state = replica.allocator.state
        web = await _two_busy_nodes(webhook, kube_api, replica, publish)
        kube_api.evictions.refuse("default", f"web-{HASH}-a", times=5)
        await publish(intents.StartDefrag(intent_id="campaign-2", pool="default", max_moves=1, max_duration_s=120))
        await until(lambda: "default" in state.campaigns and not state.campaigns["default"].running,
                    what="the campaign ended")
        campaign = state.campaigns["default"]
        assert campaign.cancelled == 1 and campaign.outcomes[0].code == "eviction_refused"
        assert len(kube_api.evictions.requests) == 1  # a refusal is not retried for a move
        assert state.gpus["node-2-gpu0"].used_milli_tflops == 40_000  # the reservation is freed
        assert state.allocations[web].node == "node-1"  # the pod stays where it runs
        assert _ungated(kube_api, f"web-{HASH}-a") is not None
        assert not (kube_api.get("pods", f"web-{HASH}-a", namespace="default") or {})["metadata"].get(
            "deletionTimestamp")
