"""Preemption handover against the in-test API server and real NATS: the binder evicts each victim
through the Eviction API and lifts the preemptor's gate only once every victim's pod is deleted.

The preemption decision is written to GPULEDGER_EVENTS as the allocator writes it: one
AllocationPreempted per victim, then the preemptor's AllocationGranted with ``preempted``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio import client
from nats.js import JetStreamContext

from events import decisions
from services.admission.binder import Binder
from services.admission.evict import PREEMPTED_ANNOTATION, evict_pod
from services.admission.view import ClusterView
from services.podspec import keys
from services.shared import kube
from tests.fixtures.kube_api import KubeApiServer

from .test_binder_and_watches import NOW, _emit, _gated_pod, _publisher, _released, _spec, _stop, _ungated, _until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def _running_pod(name: str, allocation_id: str) -> dict[str, Any]:
    pod = _gated_pod(name, allocation_id, nodeName="node-1", terminationGracePeriodSeconds=45)
    pod["spec"]["schedulingGates"] = []
    return pod


def _preempted(victim: str, pod: str) -> decisions.AllocationPreempted:
    return decisions.AllocationPreempted(
        at=NOW, allocation_id=victim, namespace="default", pod=pod, pool="p", node="node-1", gpus=("gpu-1",),
        preemptor="big-1", preemptor_namespace="default", preemptor_pod="big", priority=0,
        preemptor_priority=100_000, reason="critical preempts medium")


async def _preempt(js: JetStreamContext, victims: dict[str, str]) -> None:
    """Grants for the victims, then one preemption decision taking their GPU for ``big-1``."""
    for victim, pod in victims.items():
        await _emit(js, decisions.AllocationGranted(at=NOW, spec=_spec(victim, pod), node="node-1",
                                                    gpus=("gpu-1",), charges=()))
    for victim, pod in victims.items():
        await _emit(js, _preempted(victim, pod))
    await _emit(js, decisions.AllocationGranted(at=NOW, spec=_spec("big-1", "big"), node="node-1", gpus=("gpu-1",),
                                                charges=(), preempted=tuple(victims)))


def _pinned(kube_api: KubeApiServer, name: str) -> dict[str, Any] | None:
    pod = kube_api.get("pods", name, namespace="default")
    return pod if pod and keys.GPU_IDS in pod["metadata"]["annotations"] else None


def _terminating(kube_api: KubeApiServer, name: str) -> bool:
    return bool((kube_api.get("pods", name, namespace="default") or {}).get("metadata", {}).get("deletionTimestamp"))


async def test_victims_are_evicted_and_the_gate_waits_for_their_deletion(kube_api: KubeApiServer, jetstream) -> None:
    victims = {kube_api.create("pods", _running_pod(pod, victim))["metadata"]["uid"]: (victim, pod)
               for victim, pod in (("v-1", "small-1"), ("v-2", "small-2"))}
    kube_api.create("pods", _gated_pod("big", "big-1"), namespace="default")
    kube_api.evictions.refuse("default", "small-2", times=2)  # a PodDisruptionBudget says no, twice
    await _preempt(jetstream, {"v-1": "small-1", "v-2": "small-2"})
    async with await kube.api_client(url=kube_api.url) as api:
        binder = Binder(api, publish=_publisher(jetstream), view=ClusterView(), eviction_retry_s=0.05)
        task = asyncio.create_task(binder.run(jetstream))
        try:
            await _until(lambda: _terminating(kube_api, "small-1") and _terminating(kube_api, "small-2"))
            victim = kube_api.get("pods", "small-1", namespace="default") or {}
            assert victim["metadata"]["annotations"][PREEMPTED_ANNOTATION] == (
                "default/big (priority 100000 over 0): critical preempts medium")
            pinned = await _until(lambda: _pinned(kube_api, "big"))
            assert {"name": keys.SCHEDULING_GATE} in pinned["spec"]["schedulingGates"]  # victims still there
            kube_api.delete("pods", "small-1", namespace="default")  # the kubelet ends small-1 first
            await _until(lambda: "v-1" in binder.handover.gone)
            assert _ungated(kube_api, "big") is None
            kube_api.delete("pods", "small-2", namespace="default")
            bound = await _until(lambda: _ungated(kube_api, "big"))
        finally:
            await _stop(task)
    bodies = kube_api.evictions.requests
    assert sorted(name for _, name, _ in bodies) == ["small-1"] + ["small-2"] * 3  # concurrent evictions
    for namespace, name, body in bodies:
        uid = next(u for u, (_, pod) in victims.items() if pod == name)
        assert body == {"apiVersion": "policy/v1", "kind": "Eviction",
                        "metadata": {"name": name, "namespace": namespace},
                        "deleteOptions": {"preconditions": {"uid": uid}}}  # no grace override: the pod's 45 s
    assert bound["metadata"]["annotations"][keys.GPU_IDS] == "gpu-1"
    assert not [i for i in await _released(jetstream) if i.allocation_id in ("v-1", "v-2")]


async def test_a_restarted_binder_rebuilds_the_handover_from_the_log_and_the_pod_list(
        kube_api: KubeApiServer, jetstream) -> None:
    kube_api.create("pods", _running_pod("small-1", "v-1"))
    kube_api.create("pods", _running_pod("small-2", "v-2"))
    kube_api.create("pods", _gated_pod("big", "big-1"), namespace="default")
    await _preempt(jetstream, {"v-1": "small-1", "v-2": "small-2"})
    async with await kube.api_client(url=kube_api.url) as api:
        first = Binder(api, publish=_publisher(jetstream))
        task = asyncio.create_task(first.run(jetstream))
        try:
            await _until(lambda: _terminating(kube_api, "small-1") and _terminating(kube_api, "small-2"))
        finally:
            await _stop(task)
        kube_api.patch("pods", "small-1", {"status": {"phase": "Failed"}}, namespace="default")  # ended meanwhile
        second = Binder(api, publish=_publisher(jetstream))
        task = asyncio.create_task(second.run(jetstream))
        try:
            await _until(lambda: second.pods_synced.is_set() and "v-1" in second.handover.gone)
            assert second.handover.waiting == {"big-1": {"v-2"}} and _ungated(kube_api, "big") is None
            assert len(kube_api.evictions.requests) == 2  # small-2 is terminating already: not evicted again
            kube_api.delete("pods", "small-2", namespace="default")
            await _until(lambda: _ungated(kube_api, "big"))
        finally:
            await _stop(task)
    assert not [i for i in await _released(jetstream) if i.allocation_id in ("v-1", "v-2")]


async def test_eviction_of_a_pod_that_is_gone_or_replaced_ends_without_retrying(kube_api: KubeApiServer) -> None:
    kube_api.create("pods", _running_pod("small-1", "v-1"))
    async with await kube.api_client(url=kube_api.url) as api:
        core = client.CoreV1Api(api)
        assert not await evict_pod(core, namespace="default", name="absent", uid="", allocation_id="x")
        assert not await evict_pod(core, namespace="default", name="small-1", uid="an-older-pod", allocation_id="v-1")
        assert not _terminating(kube_api, "small-1")
        kube_api.fail_next("POST", "/eviction", status=503)
        assert await evict_pod(core, namespace="default", name="small-1", uid="", allocation_id="v-1",
                               first_delay_s=0.01)
    assert _terminating(kube_api, "small-1")
    assert [name for _, name, _ in kube_api.evictions.requests] == ["absent", "small-1", "small-1"]
