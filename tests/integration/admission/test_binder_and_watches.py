"""Binder and watches against the in-test Kubernetes API server (real REST + watch JSON) and real NATS."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp
import msgspec
import pytest
from nats.js import JetStreamContext

from events import codec, decisions, intents, subjects
from events.values import AllocationSpec, Resources
from services.admission import quota_sync, share_status
from services.admission.binder import Binder
from services.admission.view import ClusterView
from services.admission.watches import QuotaTracker, ShareTracker, watch_profiles, watch_quotas
from services.podspec import keys
from services.shared import kube, messaging
from tests.fixtures.kube_api import KubeApiServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _gated_pod(name: str, allocation_id: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default",
                         "labels": {keys.ALLOCATION_ID_LABEL: allocation_id, keys.ENABLED: "true"},
                         "annotations": {keys.QOS: "medium"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}],
                     "schedulingGates": [{"name": "other.io/gate"}, {"name": keys.SCHEDULING_GATE}], **spec}}


def _spec(allocation_id: str, pod: str) -> AllocationSpec:
    one = Resources(milli_tflops=1000, vram_bytes=2**30)
    return AllocationSpec(allocation_id=allocation_id, namespace="default", pod=pod, pool="p", request=one, limit=one)


async def _emit(js: JetStreamContext, event: decisions.AnyEvent) -> None:
    await js.publish(subjects.event_subject(codec.tag_of(event)), codec.encode(event))


async def _until(predicate: Callable[[], Any]) -> Any:
    async with asyncio.timeout(15):
        while not (value := predicate()):
            await asyncio.sleep(0.02)
    return value


async def _released(js: JetStreamContext) -> list[intents.ReleaseAllocation]:
    info = await js.stream_info(subjects.INTENT_STREAM)
    out = []
    for seq in range(1, info.state.last_seq + 1):
        intent = codec.decode_intent((await js.get_msg(subjects.INTENT_STREAM, seq)).data)
        if isinstance(intent, intents.ReleaseAllocation):
            out.append(intent)
    return out


def _publisher(js: JetStreamContext) -> Callable[[Any], Any]:
    async def publish(intent: Any) -> int:
        return await messaging.publish_intent(js, intent, timeout=2.0)
    return publish


async def _stop(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _ungated(kube_api: KubeApiServer, name: str) -> dict[str, Any] | None:
    pod = kube_api.get("pods", name, namespace="default")
    gates = (pod or {}).get("spec", {}).get("schedulingGates", [])
    return pod if pod and {"name": keys.SCHEDULING_GATE} not in gates else None


async def test_binder_pins_ungates_releases_and_survives_410(kube_api: KubeApiServer, jetstream) -> None:
    kube_api.create("pods", _gated_pod("before", "a-1"), namespace="default")
    await _emit(jetstream, decisions.AllocationGranted(at=NOW, spec=_spec("a-1", "before"), node="node-1",
                                                       gpus=("gpu-1", "gpu-2"), charges=()))
    await _emit(jetstream, decisions.AllocationGranted(at=NOW, spec=_spec("ghost", "gone"), node="node-1",
                                                       gpus=("gpu-3",), charges=()))
    async with await kube.api_client(url=kube_api.url) as api:
        binder = Binder(api, publish=_publisher(jetstream), view=ClusterView(), orphan_grace_s=0.0,
                        sweep_period_s=0.1)
        task = asyncio.create_task(binder.run(jetstream))
        try:
            pod = await _until(lambda: _ungated(kube_api, "before"))  # granted before the binder started
            assert pod["metadata"]["annotations"][keys.GPU_IDS] == "gpu-1,gpu-2"
            assert pod["spec"]["schedulingGates"] == [{"name": "other.io/gate"}]
            terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert terms["nodeSelectorTerms"] == [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                                     "values": ["node-1"]}]}]
            released = await _until(lambda: binder.released)  # sweep: the ghost allocation has no pod
            assert released == {"ghost"}
            kube_api.expire()  # 410 Gone on the pod watch: the binder re-lists and goes on
            await _emit(jetstream, decisions.AllocationGranted(at=NOW, spec=_spec("a-2", "after"), node="node-2",
                                                               gpus=("gpu-9",), charges=()))
            kube_api.create("pods", _gated_pod("after", "a-2"), namespace="default")  # grant came first
            after = await _until(lambda: _ungated(kube_api, "after"))
            assert after["metadata"]["annotations"][keys.GPU_IDS] == "gpu-9"
            kube_api.delete("pods", "before", namespace="default")
            await _until(lambda: "a-1" in binder.released)
        finally:
            await _stop(task)
    released_intents = {i.allocation_id: i for i in await _released(jetstream)}
    assert released_intents["a-1"].reason == "pod deleted" and released_intents["a-1"].pod == "before"
    assert released_intents["ghost"].reason == "pod not found"


async def test_queued_pod_deleted_is_released(kube_api: KubeApiServer, jetstream) -> None:
    kube_api.create("pods", _gated_pod("waiting", "q-1"), namespace="default")
    await _emit(jetstream, decisions.AllocationQueued(at=NOW, spec=_spec("q-1", "waiting"), reason="full",
                                                      code="capacity"))
    async with await kube.api_client(url=kube_api.url) as api:
        binder = Binder(api, publish=_publisher(jetstream))
        task = asyncio.create_task(binder.run(jetstream))
        try:
            await _until(lambda: binder.pods_synced.is_set() and binder.events_synced.is_set())
            assert _ungated(kube_api, "waiting") is None  # queued: stays gated
            kube_api.delete("pods", "waiting", namespace="default")
            await _until(lambda: "q-1" in binder.released)
        finally:
            await _stop(task)
    assert [i.allocation_id for i in await _released(jetstream)] == ["q-1"]


async def test_quota_and_profile_watches(kube_api: KubeApiServer, jetstream) -> None:
    view = ClusterView()
    quota = {"metadata": {"name": "q", "namespace": "team-a"},
             "spec": {"total": {"requests": {"tflops": "100", "vram": "10Gi"}},
                      "single": {"defaultRequests": {"tflops": "500m", "vram": "1Gi"}}}}
    async with await kube.api_client(url=kube_api.url) as api:
        tasks = [asyncio.create_task(watch_quotas(api, view=view, publish=_publisher(jetstream))),
                 asyncio.create_task(watch_profiles(api, view=view))]
        try:
            kube_api.create("gpuresourcequotas", quota, namespace="team-a")
            kube_api.create("workloadprofiles", {"metadata": {"name": "prof", "namespace": "team-a"},
                                                 "spec": {"qos": "high"}}, namespace="team-a")
            await _until(lambda: "team-a" in view.quotas and ("team-a", "prof") in view.profiles)
            assert view.quotas["team-a"].default_requests == Resources(milli_tflops=500, vram_bytes=2**30)
            kube_api.delete("gpuresourcequotas", "q", namespace="team-a")
            kube_api.delete("workloadprofiles", "prof", namespace="team-a")
            await _until(lambda: "team-a" not in view.quotas and not view.profiles)
            async with asyncio.timeout(15):  # the view changes before the publish: do not cancel it midway
                while (await jetstream.stream_info(subjects.INTENT_STREAM)).state.last_seq < 2:
                    await asyncio.sleep(0.02)
        finally:
            for task in tasks:
                await _stop(task)
    info = await jetstream.stream_info(subjects.INTENT_STREAM)
    published = [codec.decode_intent((await jetstream.get_msg(subjects.INTENT_STREAM, s)).data)
                 for s in range(1, info.state.last_seq + 1)]
    assert [type(i).__name__ for i in published] == ["SetQuota", "RemoveQuota"]
    assert published[0].spec.total_requests.milli_tflops == 100_000  # type: ignore[union-attr]


async def test_rejected_pod_is_annotated_with_the_reason_and_stays_gated(kube_api: KubeApiServer, jetstream) -> None:
    rejected = decisions.AllocationRejected(at=NOW, spec=_spec("r-1", "never"), reason="bigger than any GPU",
                                            code="too_big")
    await _emit(jetstream, rejected)
    async with await kube.api_client(url=kube_api.url) as api:
        binder = Binder(api, publish=_publisher(jetstream))
        task = asyncio.create_task(binder.run(jetstream))
        try:
            await _until(lambda: binder.events_synced.is_set())
            kube_api.create("pods", _gated_pod("never", "r-1"), namespace="default")
            pod = await _until(lambda: (kube_api.get("pods", "never", namespace="default") or {}).get(
                "metadata", {}).get("annotations", {}).get("gpuledger.io/rejected") and
                kube_api.get("pods", "never", namespace="default"))
        finally:
            await _stop(task)
    assert pod["metadata"]["annotations"]["gpuledger.io/rejected"] == "bigger than any GPU"
    assert {"name": keys.SCHEDULING_GATE} in pod["spec"]["schedulingGates"]


async def test_each_container_gets_its_gpus_at_bind(kube_api: KubeApiServer, jetstream) -> None:
    """TensorFusion allocateGPUsToContainers: sorted container names take consecutive granted GPUs."""
    pod = _gated_pod("split", "s-1")
    pod["spec"]["containers"] = [{"name": "trainer", "image": "busybox"}, {"name": "agent", "image": "busybox"}]
    kube_api.create("pods", pod, namespace="default")
    spec = msgspec.structs.replace(_spec("s-1", "split"), gpu_count=3, attributes={
        keys.INJECT_CONTAINER: "trainer,agent", keys.CONTAINER_GPU_COUNT: '{"trainer":2,"agent":1}'})
    await _emit(jetstream, decisions.AllocationGranted(at=NOW, spec=spec, node="node-1",
                                                       gpus=("gpu-7", "gpu-3", "gpu-5"), charges=()))
    async with await kube.api_client(url=kube_api.url) as api:
        task = asyncio.create_task(Binder(api, publish=_publisher(jetstream)).run(jetstream))
        try:
            bound = await _until(lambda: _ungated(kube_api, "split"))
        finally:
            await _stop(task)
    annotations = bound["metadata"]["annotations"]
    assert annotations[keys.GPU_IDS] == "gpu-7,gpu-3,gpu-5"
    assert annotations[keys.CONTAINER_GPUS] == '{"agent":["gpu-7"],"trainer":["gpu-3","gpu-5"]}'


async def test_the_quota_status_writer_survives_an_unreachable_allocator(kube_api: KubeApiServer) -> None:
    tracker, calls = QuotaTracker(ClusterView()), []
    quota = kube_api.create("gpuresourcequotas", {"metadata": {"name": "q", "namespace": "team-a"}, "spec": {}},
                            namespace="team-a")
    tracker.apply("ADDED", quota)
    status = {"available_percent": dict.fromkeys(("requests.tflops", "workers"), "100"), "alert": False,
              "reason": "CapacitySufficient", "message": "fine"}

    async def fetch() -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            raise aiohttp.ClientConnectionError("allocator down")
        return {"team-a": {"namespace": "team-a", "usage": {"workers": 0}, "status": status}}

    async with await kube.api_client(url=kube_api.url) as api:
        task = asyncio.create_task(quota_sync.sync_forever(api, tracker=tracker, fetch=fetch, period_s=0.01))
        try:
            written = await _until(lambda: (kube_api.get("gpuresourcequotas", "q", namespace="team-a") or {}).get(
                "status"))
        finally:
            await _stop(task)
    assert len(calls) >= 2 and written["conditions"][0]["reason"] == "CapacitySufficient"


async def test_the_share_status_writer_survives_an_unreachable_allocator(kube_api: KubeApiServer) -> None:
    tracker, calls = ShareTracker(), []
    tracker.apply("ADDED", kube_api.create("gpushares", {"metadata": {"name": "s"}, "spec": {}}))
    tracker.apply(kube.SYNCED, {})

    async def fetch() -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            raise aiohttp.ClientConnectionError("allocator down")
        return {"s": {"name": "s", "spec": {"namespaces": [], "parent": "", "weight": 1, "pools": []}, "pools": []}}

    async with await kube.api_client(url=kube_api.url) as api:
        task = asyncio.create_task(share_status.sync_forever(api, tracker=tracker, fetch=fetch, period_s=0.01))
        try:
            written = await _until(lambda: (kube_api.get("gpushares", "s") or {}).get("status"))
        finally:
            await _stop(task)
    assert len(calls) >= 2 and written["conditions"][0]["reason"] == "InForce"


async def test_timed_out_gang_members_are_annotated_with_the_reason(kube_api: KubeApiServer, jetstream) -> None:
    """A gang that timed out leaves its waiting members' pods gated, each annotated with why."""
    queued = decisions.AllocationQueued(at=NOW, spec=_spec("g-1", "member"), reason="gang: 1 of 2", code="gang")
    timed_out = decisions.GangTimedOut(at=NOW, key="default/trainer", namespace="default", quorum=2, present=1,
                                       timeout_s=60, waiting=("g-1",), reason="gang default/trainer timed out")
    released = decisions.AllocationReleased(at=NOW, allocation_id="g-1", namespace="default", pod="member",
                                            pool="default", was_queued=True, reason="gang default/trainer timed out")
    await _emit(jetstream, queued)
    async with await kube.api_client(url=kube_api.url) as api:
        binder = Binder(api, publish=_publisher(jetstream))
        task = asyncio.create_task(binder.run(jetstream))
        try:
            kube_api.create("pods", _gated_pod("member", "g-1"), namespace="default")
            await _until(lambda: binder.events_synced.is_set() and "g-1" in binder.pods)
            await _emit(jetstream, timed_out)
            await _emit(jetstream, released)
            pod = await _until(lambda: (kube_api.get("pods", "member", namespace="default") or {}).get(
                "metadata", {}).get("annotations", {}).get("gpuledger.io/rejected") and
                kube_api.get("pods", "member", namespace="default"))
        finally:
            await _stop(task)
    assert pod["metadata"]["annotations"]["gpuledger.io/rejected"] == "gang default/trainer timed out"
    assert {"name": keys.SCHEDULING_GATE} in pod["spec"]["schedulingGates"]


async def test_a_pod_of_another_namespace_wearing_a_live_id_is_neither_bound_nor_released(
        kube_api: KubeApiServer, jetstream) -> None:
    """The allocation-id label is any pod creator's to write: a pod of namespace ``intruder`` labelled
    with the id of default's granted allocation gets neither its GPUs nor, when deleted, its release;
    nor does one wearing the id of default's queued allocation release it."""
    intruder = _gated_pod("squat", "a-1")
    intruder["metadata"]["namespace"] = "intruder"
    kube_api.create("pods", intruder, namespace="intruder")
    await _emit(jetstream, decisions.AllocationGranted(at=NOW, spec=_spec("a-1", "owner"), node="node-1",
                                                       gpus=("gpu-1",), charges=()))
    async with await kube.api_client(url=kube_api.url) as api:
        binder = Binder(api, publish=_publisher(jetstream), view=ClusterView())
        task = asyncio.create_task(binder.run(jetstream))
        try:
            await _until(lambda: binder.pods_synced.is_set() and binder.events_synced.is_set())
            kube_api.create("pods", _gated_pod("owner", "a-1"), namespace="default")
            await _until(lambda: _ungated(kube_api, "owner"))
            squat = kube_api.get("pods", "squat", namespace="intruder")
            assert squat is not None and {"name": keys.SCHEDULING_GATE} in squat["spec"]["schedulingGates"]
            assert keys.GPU_IDS not in squat["metadata"]["annotations"]
            kube_api.delete("pods", "squat", namespace="intruder")
            await _emit(jetstream, decisions.AllocationQueued(at=NOW, spec=_spec("q-1", "waiting"), reason="full",
                                                              code="capacity"))
            await _until(lambda: "q-1" in binder.book.queued)
            queued_squat = _gated_pod("squat-queued", "q-1")
            queued_squat["metadata"]["namespace"] = "intruder"
            kube_api.create("pods", queued_squat, namespace="intruder")
            kube_api.delete("pods", "squat-queued", namespace="intruder")
            await asyncio.sleep(0.5)
            assert not binder.released & {"a-1", "q-1"}, binder.released
        finally:
            await _stop(task)
    assert await _released(jetstream) == []
