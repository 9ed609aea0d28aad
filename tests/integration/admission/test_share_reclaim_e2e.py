"""Fair share end to end on the real stack (issue 30): the HTTPS webhook, an allocator replica, the
binder and the in-test API server, over a real nats-server.

Two namespaces in two shares, each guaranteed one of the node's two GPUs. team-a borrows the whole
pool (its second pod is granted beyond its guarantee, marked borrowed); team-b's pod arrives within
its guarantee, so the allocator reclaims team-a's borrowed allocation: the binder evicts that pod
through the Eviction API and lifts team-b's gate once it is gone.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import jsonpatch
import msgspec
import pytest
from nats.js import JetStreamContext

from events import decisions, intents
from events.values import ShareAmount, SharePool, ShareSpec
from services.podspec import keys
from services.shared import messaging
from tests.fixtures.kube_api import KubeApiServer
from tests.integration.service.harness import published_events, until
from tests.unit.admission.builders import a_pod, a_review

from .test_preemption_e2e import _stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def _admit(webhook: Any, kube_api: KubeApiServer, namespace: str, name: str) -> str:
    """Review a one-GPU pod of ``namespace`` through the webhook and store it patched; its allocation id."""
    pod = a_pod({"tflops-request": "80", "vram-request": "8Gi"}, name=name, uid="", terminationGracePeriodSeconds=30)
    pod["metadata"]["namespace"] = namespace
    answer = (await webhook.post(a_review(pod, uid=f"review-{name}", namespace=namespace)))["response"]
    assert answer["allowed"], answer
    admitted = jsonpatch.apply_patch(pod, msgspec.json.decode(base64.b64decode(answer["patch"])))
    kube_api.create("pods", admitted, namespace=namespace)
    return str(admitted["metadata"]["labels"][keys.ALLOCATION_ID_LABEL])


def _pod(kube_api: KubeApiServer, namespace: str, name: str) -> dict[str, Any]:
    return kube_api.get("pods", name, namespace=namespace) or {}


def _ungated(kube_api: KubeApiServer, namespace: str, name: str) -> bool:
    pod = _pod(kube_api, namespace, name)
    return bool(pod) and {"name": keys.SCHEDULING_GATE} not in pod.get("spec", {}).get("schedulingGates", [])


def _gpus(kube_api: KubeApiServer, namespace: str, name: str) -> str:
    return str(_pod(kube_api, namespace, name).get("metadata", {}).get("annotations", {}).get(keys.GPU_IDS, ""))


async def test_a_share_within_its_guarantee_reclaims_a_borrowed_pod_through_the_binder(
        kube_api: KubeApiServer, jetstream: JetStreamContext, nats_url: str,
        start_webhook: Callable[..., Any]) -> None:
    one_gpu = SharePool(pool="default", guaranteed=ShareAmount(gpus=1))
    async with _stack(kube_api, jetstream, nats_url, start_webhook, gpus=2, eviction_retry_s=0.05) as (webhook, store):
        for name, namespace in (("share-a", "team-a"), ("share-b", "team-b")):
            await messaging.publish_intent(jetstream, intents.SetShare(
                intent_id=f"set-{name}", name=name, spec=ShareSpec(namespaces=(namespace,), pools=(one_gpu,))),
                timeout=2.0)
        await until(lambda: "set-share-b" in store.intents, what="the shares set")
        first = await _admit(webhook, kube_api, "team-a", "a1")
        borrower = await _admit(webhook, kube_api, "team-a", "a2")
        await until(lambda: _ungated(kube_api, "team-a", "a1") and _ungated(kube_api, "team-a", "a2"),
                    what="team-a's two pods bound (the whole pool)")
        owner = await _admit(webhook, kube_api, "team-b", "b1")
        await until(lambda: bool(kube_api.evictions.requests), what="the borrowed pod evicted")
        await until(lambda: bool(_gpus(kube_api, "team-b", "b1")), what="team-b's pod pinned")
        assert not _ungated(kube_api, "team-b", "b1")  # the borrowed pod still terminates on the GPU
        assert _gpus(kube_api, "team-b", "b1") == _gpus(kube_api, "team-a", "a2")
        kube_api.delete("pods", "a2", namespace="team-a")  # its grace period is over
        await until(lambda: _ungated(kube_api, "team-b", "b1"), what="team-b's pod ungated")
    (namespace, name, body), = kube_api.evictions.requests
    assert (namespace, name, body["kind"]) == ("team-a", "a2", "Eviction")
    events = [p.event for p in await published_events(jetstream._nc)]
    grants = {e.spec.allocation_id: e for e in events if isinstance(e, decisions.AllocationGranted)}
    assert (grants[first].share, grants[first].borrowed) == ("share-a", False)
    assert (grants[borrower].share, grants[borrower].borrowed) == ("share-a", True)
    assert (grants[owner].share, grants[owner].borrowed, grants[owner].preempted) == ("share-b", False, (borrower,))
    (taken,) = [e for e in events if isinstance(e, decisions.AllocationPreempted)]
    assert (taken.allocation_id, taken.preemptor, taken.reclaim) == (borrower, owner, True)
    assert _ungated(kube_api, "team-a", "a1")  # the allocation within team-a's guarantee stays
