"""The binder: pins admitted pods to their granted node and ungates them; releases what pods leave.

Three loops on one asyncio loop (state in one Binder, no locks):
* events: replays GPULEDGER_EVENTS from the start (ordered consumer) into an AllocationBook, so no
  state is stored elsewhere; each AllocationGranted binds its pod if the pod is known;
* pods: watches pods labelled ``gpuledger.io/allocation-id`` (re-list on start and on 410), each one
  counting for its allocation only when it is the pod the webhook admitted for it
  (:func:`~services.admission.binding.claim_refusal`; others are logged ``pod_claim_refused``); a gated
  pod whose allocation is granted is bound (covers a grant that arrived before the pod was
  stored), a bound one gets its grant annotations back if they differ (a resize changed the device
  plan's limits, or someone edited them); a deleted or finished pod publishes ReleaseAllocation
  (also drops a queued request);
* sweep: once both are caught up, an allocation live for ``orphan_grace_s`` with no pod (the pod
  was deleted while the binder was down, or its creation failed after admission) is released.

Preemption (services/admission/handover.py): each AllocationPreempted victim's pod is evicted through
the Eviction API (services/admission/evict.py, one task per victim, retried while a
PodDisruptionBudget refuses); a grant with ``preempted`` victims is pinned at once but keeps its gate
until every victim's pod is gone (deleted, finished, or absent from the complete pod list). A victim's
pod leaving publishes no release: the domain already freed its GPUs.

Defrag moves (services/allocator/domain/defrag_campaign.py): each MoveReserved's source pod is evicted
once through the Eviction API (the target is already reserved); a 429 (PodDisruptionBudget) is not
retried but reported as CancelMove, which frees the reservation; the source's pod leaving releases its
allocation as usual, and its replacement's grant (the reserved GPUs) is bound as any grant. A move
completed or cancelled stops its eviction.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from nats.js import JetStreamContext

from events import codec, decisions, subjects
from events.base import Intent
from events.bounds import MAX_ID_LENGTH
from events.defrag import CancelMove, DefragEnded, MoveCancelled, MoveCompleted, MoveReserved
from events.intents import ReleaseAllocation
from services.admission.binding import claim_refusal, is_gated, pin_ops, ungate_ops
from services.admission.book import AllocationBook, Grant
from services.admission.evict import MOVED_ANNOTATION, evict_pod
from services.admission.handover import Handover
from services.admission.patch import map_ops
from services.admission.view import ClusterView
from services.podspec import keys
from services.shared import kube, messaging

PublishIntent = Callable[[Intent], Awaitable[object]]
log = structlog.get_logger("gpuledger.admission.binder")
_FINISHED = ("Succeeded", "Failed")
REJECTED_ANNOTATION = "gpuledger.io/rejected"
"""Set on a gated pod whose allocation was rejected (it can never fit); the value is the reason."""


def _allocation_id(pod: dict[str, Any]) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(keys.ALLOCATION_ID_LABEL) or "")


class Binder:
    """Binds granted allocations to pods and releases allocations whose pod is gone."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        publish: PublishIntent,
        view: ClusterView | None = None,
        namespace: str = "",
        orphan_grace_s: float = 30.0,
        sweep_period_s: float = 5.0,
        eviction_retry_s: float = 0.5,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.publish = publish
        self.view = view
        self.namespace = namespace
        self.orphan_grace_s = orphan_grace_s
        self.sweep_period_s = sweep_period_s
        self.book = AllocationBook()
        self.pods: dict[str, dict[str, Any]] = {}
        self.events_synced = asyncio.Event()
        self.pods_synced = asyncio.Event()
        self.missing_since: dict[str, float] = {}
        self.released: set[str] = set()
        self.eviction_retry_s = eviction_retry_s
        """First pause before an eviction refused (429, 5xx) is tried again; doubles up to 30 s."""
        self.handover = Handover()
        self.evictions: dict[str, asyncio.Task[bool]] = {}
        """Victim allocation id -> its eviction task (kept until the victim's pod is gone)."""
        self.moves: dict[str, MoveReserved] = {}
        """Open defrag moves: source allocation id -> its reservation (until completed or cancelled)."""
        self.move_evictions: dict[str, asyncio.Task[bool]] = {}
        """Source allocation id -> its move's eviction task."""
        self._group: asyncio.TaskGroup | None = None
        self.refused: set[tuple[str, str]] = set()
        """(allocation id, pod UID) of pods refused as that allocation's pod, logged once each."""

    async def run(self, js: JetStreamContext) -> None:
        """Run the three loops until cancelled."""
        async with asyncio.TaskGroup() as group:
            self._group = group
            group.create_task(self.follow_events(js))
            group.create_task(self.watch_pods())
            group.create_task(self.sweep_forever())

    async def follow_events(self, js: JetStreamContext) -> None:
        """Replay GPULEDGER_EVENTS from its start, then follow it."""
        last = (await js.stream_info(subjects.EVENT_STREAM)).state.last_seq
        if last == 0:
            self._synced()
        sub = await messaging.subscribe_events(js)
        async for msg in sub.messages:
            try:
                event = codec.decode_event(msg.data)
            except (codec.DecodeError, msgspec.DecodeError) as exc:
                log.warning("undecodable_event", subject=msg.subject, error=str(exc))
                event = None
            grant = self.book.apply(event, view=self.view) if event is not None else None
            if msg.metadata.sequence.stream >= last:
                self._synced()
            if grant is not None and isinstance(event, decisions.AllocationGranted):
                self.handover.granted(grant.allocation_id, event.preempted)
                await self.bind(grant)
            elif grant is not None and isinstance(event, decisions.AllocationResized):
                await self.refresh(grant)
            elif isinstance(event, decisions.AllocationPreempted):
                if self.handover.preempted(event) is not None:
                    await self.reconcile_victim(event.allocation_id)
            elif isinstance(event, decisions.AllocationRejected):
                await self.mark_rejected(event.spec.allocation_id)
            elif isinstance(event, decisions.GangTimedOut):
                for allocation_id in event.waiting:
                    await self.mark_rejected(allocation_id)
            elif isinstance(event, decisions.AllocationReleased):
                self.released.discard(event.allocation_id)  # a later pod event finds it not live
                self.handover.ended(event.allocation_id)
            elif isinstance(event, MoveReserved):
                self.moves[event.allocation_id] = event
                await self.reconcile_move(event.allocation_id)
            elif isinstance(event, MoveCompleted | MoveCancelled):
                self._move_closed(event.allocation_id)
            elif isinstance(event, DefragEnded):
                for allocation_id in [a for a, m in self.moves.items() if m.campaign_id == event.campaign_id]:
                    self._move_closed(allocation_id)

    def _synced(self) -> None:
        self.events_synced.set()
        if self.view is not None:
            self.view.replayed = True  # the webhook may admit now (services/admission/view.py)

    async def watch_pods(self) -> None:
        """Track gpuledger pods; bind gated granted ones, release deleted or finished ones.

        Starts once the event replay is complete, so a pod that left while the binder was down is
        judged against the whole log (a preempted victim's pod releases nothing)."""
        await self.events_synced.wait()
        list_fn = (
            functools.partial(self.core.list_namespaced_pod, self.namespace)
            if self.namespace
            else self.core.list_pod_for_all_namespaces
        )
        async for event in kube.watch_objects(functools.partial(list_fn, label_selector=keys.ALLOCATION_ID_LABEL)):
            if event.type == kube.SYNCED:
                self.pods_synced.set()
                for victim in list(self.handover.victims):
                    await self.reconcile_victim(victim)
                for source in list(self.moves):
                    await self.reconcile_move(source)
                continue
            allocation_id = _allocation_id(event.object)
            if not allocation_id or self._refused(allocation_id, event.object, gone=event.type == "DELETED"):
                continue
            if event.type == "DELETED":
                self.pods.pop(allocation_id, None)
                self.book.rejected.pop(allocation_id, None)
                await self.release(allocation_id, pod=event.object, reason="pod deleted")
                await self.reconcile_victim(allocation_id)
                continue
            self.pods[allocation_id] = event.object
            self.missing_since.pop(allocation_id, None)
            if (event.object.get("status") or {}).get("phase") in _FINISHED:
                await self.release(allocation_id, pod=event.object, reason="pod finished")
            elif allocation_id in self.book.granted and is_gated(event.object):
                await self.bind(self.book.granted[allocation_id])
            elif allocation_id in self.book.granted:  # bound: keep its annotations equal to the grant's
                await self.refresh(self.book.granted[allocation_id])
            elif allocation_id in self.book.rejected:
                await self.mark_rejected(allocation_id)
            await self.reconcile_victim(allocation_id)

    def _owner(self, allocation_id: str) -> tuple[str, str] | None:
        """The (namespace, pod) recorded for a live (granted, queued) or preempted allocation."""
        grant, victim = self.book.granted.get(allocation_id), self.handover.victims.get(allocation_id)
        if grant is not None:
            return grant.namespace, grant.pod
        if victim is not None:
            return victim.namespace, victim.pod
        return self.book.queued.get(allocation_id)

    def _refused(self, allocation_id: str, pod: dict[str, Any], *, gone: bool = False) -> bool:
        """Whether ``pod`` may not stand for ``allocation_id`` (:func:`binding.claim_refusal`): such a
        pod is neither bound, nor refreshed, nor evicted, nor, when deleted, released for it. Logged
        (``pod_claim_refused``) once per pod; ``gone``: the pod was deleted (forget it)."""
        problem = claim_refusal(pod, self._owner(allocation_id))
        meta = pod.get("metadata") or {}
        key = (allocation_id, str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"))
        if problem is None or gone:
            self.refused.discard(key)
            return problem is not None
        if key not in self.refused:
            self.refused.add(key)
            log.warning("pod_claim_refused", allocation_id=allocation_id, namespace=str(meta.get("namespace") or ""),
                        pod=str(meta.get("name") or ""), reason=problem)
        return True

    def _pod_of(self, grant: Grant) -> dict[str, Any] | None:
        """The pod known for ``grant`` if it may stand for it; a pod seen before the grant that may
        not (:meth:`_refused`) is forgotten."""
        pod = self.pods.get(grant.allocation_id)
        if pod is not None and self._refused(grant.allocation_id, pod):
            del self.pods[grant.allocation_id]
            return None
        return pod

    async def bind(self, grant: Grant) -> None:
        """Pin the pod of ``grant`` to its node, then remove the gate (kept while victims' pods remain);
        a no-op when done or the pod is unknown."""
        pod = self._pod_of(grant)
        if pod is None or not is_gated(pod):
            return
        meta = pod["metadata"]
        blocked, patched = self.handover.blocked(grant.allocation_id), False
        try:
            for build in (functools.partial(pin_ops, grant=grant), *(() if blocked else (ungate_ops,))):
                ops = build(pod)
                if ops:
                    pod, patched = await self._patch(meta["name"], meta["namespace"], ops), True
        except ApiException as exc:
            if exc.status not in (404, 409, 422):
                raise
            log.info("bind_skipped", allocation_id=grant.allocation_id, status=exc.status)
            return
        self.pods[grant.allocation_id] = pod
        if blocked:
            if patched:
                log.info("pinned_awaiting_victims", allocation_id=grant.allocation_id, node=grant.node,
                         victims=sorted(self.handover.waiting.get(grant.allocation_id, ())))
            return
        for problem in grant.problems:
            log.warning("bind_annotation_skipped", allocation_id=grant.allocation_id, problem=problem)
        log.info("bound", allocation_id=grant.allocation_id, pod=meta["name"], node=grant.node, gpus=grant.gpus)

    async def refresh(self, grant: Grant) -> None:
        """Make a bound pod's grant annotations equal to the grant's again: after a resize (the
        device plan's limits; its containers read them at their next start, docs/runtime.md) and on
        every event of the pod (a stale copy at the resize, or an edit, is caught up). A no-op when
        they are equal; a gated pod is left to bind."""
        pod = self._pod_of(grant)
        if pod is None or is_gated(pod):
            return
        ops = pin_ops(pod, grant=grant)
        if not ops:
            return
        try:
            self.pods[grant.allocation_id] = await self._patch(pod["metadata"]["name"], pod["metadata"]["namespace"],
                                                               ops)
        except ApiException as exc:
            if exc.status not in (404, 409, 422):
                raise
            log.info("refresh_skipped", allocation_id=grant.allocation_id, status=exc.status)
            return
        log.info("annotations_refreshed", allocation_id=grant.allocation_id)

    async def mark_rejected(self, allocation_id: str) -> None:
        """Annotate a gated pod whose request was rejected with ``gpuledger.io/rejected: <reason>``."""
        pod, reason = self.pods.get(allocation_id), self.book.rejected.get(allocation_id, "")
        annotations = ((pod or {}).get("metadata") or {}).get("annotations")
        if pod is None or not is_gated(pod) or (annotations or {}).get(REJECTED_ANNOTATION) == reason:
            return
        ops = map_ops("/metadata/annotations", existing=annotations, changes={REJECTED_ANNOTATION: reason})
        try:
            self.pods[allocation_id] = await self._patch(pod["metadata"]["name"], pod["metadata"]["namespace"], ops)
        except ApiException as exc:
            if exc.status not in (404, 409, 422):
                raise

    async def _patch(self, name: str, namespace: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        patch: Callable[..., Awaitable[Any]] = self.core.patch_namespaced_pod
        response = await patch(
            name, namespace, ops, _preload_content=False, _content_type="application/json-patch+json"
        )
        async with response:
            raw = await response.read()
        if not 200 <= response.status < 300:  # unparsed responses are not raised by kubernetes-asyncio
            raise ApiException(status=response.status, reason=raw[:500].decode(errors="replace"))
        body: dict[str, Any] = msgspec.json.decode(raw)
        return body

    async def release(self, allocation_id: str, *, pod: dict[str, Any], reason: str) -> None:
        """Publish ReleaseAllocation once per allocation (intent id ``release-<id>``)."""
        if allocation_id in self.released or self.handover.is_victim(allocation_id) or (
                self.events_synced.is_set() and allocation_id not in self.book.live()):
            return
        self.released.add(allocation_id)
        meta = pod.get("metadata") or {}
        await self.publish(
            ReleaseAllocation(
                intent_id=f"release-{allocation_id}",
                allocation_id=allocation_id,
                namespace=str(meta.get("namespace") or ""),
                pod=str(meta.get("name") or ""),
                reason=reason,
            )
        )

    async def reconcile_victim(self, allocation_id: str) -> None:
        """Drive one victim once the pod list is complete: its pod gone (or finished) frees the
        preemptors waiting for it (bound now); a running pod not yet terminating is evicted once."""
        if allocation_id not in self.handover.victims or not self.pods_synced.is_set():
            return
        pod = self.pods.get(allocation_id)
        if pod is None or (pod.get("status") or {}).get("phase") in _FINISHED:
            task = self.evictions.pop(allocation_id, None)
            if task is not None:
                task.cancel()
            for preemptor in self.handover.victim_gone(allocation_id):
                log.info("victims_gone", allocation_id=preemptor)
                if (grant := self.book.granted.get(preemptor)) is not None:
                    await self.bind(grant)
            return
        meta = pod.get("metadata") or {}
        if allocation_id in self.evictions or meta.get("deletionTimestamp") or self._group is None:
            return
        self.evictions[allocation_id] = self._group.create_task(evict_pod(
            self.core, namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""), allocation_id=allocation_id, note=self.handover.victims[allocation_id].note,
            first_delay_s=self.eviction_retry_s))

    def _move_closed(self, allocation_id: str) -> None:
        self.moves.pop(allocation_id, None)
        task = self.move_evictions.pop(allocation_id, None)
        if task is not None:
            task.cancel()

    async def reconcile_move(self, allocation_id: str) -> None:
        """Evict the source pod of an open defrag move once the pod list is complete (once per move;
        a pod already terminating or gone is left alone). A refused eviction publishes CancelMove
        (intent id ``cancel-move-<campaign>-<allocation>``)."""
        move = self.moves.get(allocation_id)
        if move is None or not self.pods_synced.is_set() or self._group is None or allocation_id in self.move_evictions:
            return
        pod = self.pods.get(allocation_id)
        meta = (pod or {}).get("metadata") or {}
        if pod is None or meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in _FINISHED:
            return

        intent_id = f"cancel-move-{move.campaign_id}-{allocation_id}"
        if len(intent_id) > MAX_ID_LENGTH:  # one id per move, within the contract's bound
            intent_id = "cancel-move-" + hashlib.sha256(intent_id.encode()).hexdigest()

        async def refused(reason: str) -> None:
            await self.publish(CancelMove(intent_id=intent_id,
                                          campaign_id=move.campaign_id, allocation_id=allocation_id, pool=move.pool,
                                          code="eviction_refused", reason=reason[:1024]))

        note = (f"defrag campaign {move.campaign_id}: moving to {move.target_node} "
                f"({', '.join(move.target_gpus)}), reserved until {move.expires_at.isoformat()}")
        self.move_evictions[allocation_id] = self._group.create_task(evict_pod(
            self.core, namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""), allocation_id=allocation_id, note=note[:1024],
            first_delay_s=self.eviction_retry_s, on_refused=refused, annotation=MOVED_ANNOTATION))

    async def sweep(self, *, now: float) -> None:
        """Release live allocations that have had no pod for ``orphan_grace_s`` (after both syncs)."""
        if not (self.events_synced.is_set() and self.pods_synced.is_set()):
            return
        live = self.book.live()
        for gone in set(self.missing_since) - set(live):
            del self.missing_since[gone]
        for allocation_id, namespace in live.items():
            if allocation_id in self.pods:
                continue
            first = self.missing_since.setdefault(allocation_id, now)
            if now - first >= self.orphan_grace_s:
                await self.release(allocation_id, pod={"metadata": {"namespace": namespace}}, reason="pod not found")

    async def sweep_forever(self) -> None:
        """Run :meth:`sweep` every ``sweep_period_s`` seconds."""
        while True:
            await self.sweep(now=time.monotonic())
            await asyncio.sleep(self.sweep_period_s)
