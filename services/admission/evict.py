"""Evicting a preempted allocation's pod through the Eviction API (policy/v1), retried with backoff.

``POST /api/v1/namespaces/{ns}/pods/{name}/eviction`` with a policy/v1 Eviction whose delete options
carry only a UID precondition (never a different pod of the same name, e.g. a StatefulSet's
replacement) and no grace period, so the pod's own ``terminationGracePeriodSeconds`` applies. The API
server checks PodDisruptionBudgets: 429 (the budget allows no disruption now) is retried with
exponential backoff, like ``kubectl drain``; so are 5xx answers and connection errors. 404 (the pod
is gone) and 409 (the UID precondition failed: that pod is gone) end the attempt. Any other answer
(403: the RBAC lacks ``pods/eviction create``) is logged as an error and retried at the slowest pace.
The eviction does not wait for the pod to terminate: the binder learns that from the pod watch.
Before the first attempt the pod is annotated ``gpuledger.io/preempted-by`` (who took its GPUs and
why), so ``kubectl describe`` tells its owner; a failure to annotate is logged and does not stop the
eviction. A defrag move's eviction (``on_refused`` given) is not retried on 429: the budget's refusal
is reported (the binder cancels the move, freeing its reservation) and the pod stays, as TensorFusion's
defrag skips a pod it cannot evict; its note goes under ``gpuledger.io/moved-by``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

log = structlog.get_logger("gpuledger.admission.evict")

PREEMPTED_ANNOTATION = "gpuledger.io/preempted-by"
"""Written on a victim pod before its eviction: ``<namespace>/<pod> (priority P over Q): <reason>``."""

MOVED_ANNOTATION = "gpuledger.io/moved-by"
"""Written on a defrag move's source pod before its eviction: the campaign and the reserved target."""

GONE_STATUSES = (404, 409)
"""Answers meaning the pod to evict no longer exists (409: a UID precondition failed)."""


def eviction_body(*, namespace: str, name: str, uid: str) -> dict[str, Any]:
    """The policy/v1 Eviction for pod ``namespace/name`` with UID ``uid`` ("" = no precondition)."""
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                            "metadata": {"name": name, "namespace": namespace}}
    if uid:
        body["deleteOptions"] = {"preconditions": {"uid": uid}}
    return body


async def _post(core: client.CoreV1Api, body: dict[str, Any]) -> None:
    meta = body["metadata"]
    create: Callable[..., Awaitable[Any]] = core.create_namespaced_pod_eviction
    response = await create(meta["name"], meta["namespace"], body, _preload_content=False)
    async with response:
        text = await response.text()
    if not 200 <= response.status < 300:  # unparsed responses are not raised by kubernetes-asyncio
        raise ApiException(status=response.status, reason=text[:500])


async def annotate(core: client.CoreV1Api, *, namespace: str, name: str, note: str,
                   key: str = PREEMPTED_ANNOTATION) -> None:
    """Merge-patch annotation ``key`` = ``note`` onto the pod; failures are logged only."""
    patch: Callable[..., Awaitable[Any]] = core.patch_namespaced_pod
    body = {"metadata": {"annotations": {key: note}}}
    try:
        response = await patch(name, namespace, body, _preload_content=False,
                               _content_type="application/merge-patch+json")
        async with response:
            text = await response.text()
        if not 200 <= response.status < 300:
            log.warning("victim_annotation_failed", pod=f"{namespace}/{name}", status=response.status,
                        reason=text[:200])
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        log.warning("victim_annotation_failed", pod=f"{namespace}/{name}", error=repr(exc))


async def evict_pod(core: client.CoreV1Api, *, namespace: str, name: str, uid: str, allocation_id: str,
                    note: str = "", first_delay_s: float = 0.5, max_delay_s: float = 30.0,
                    on_refused: Callable[[str], Awaitable[object]] | None = None,
                    annotation: str = PREEMPTED_ANNOTATION) -> bool:
    """Annotate the pod with ``note`` under ``annotation`` (when given), then ask the API server to
    evict it until it accepts (True) or the pod is gone (False).

    Retries forever otherwise (cancel the task when the pod's deletion is seen), sleeping
    ``first_delay_s`` doubling to ``max_delay_s`` seconds between attempts; with ``on_refused``, a
    429 (a PodDisruptionBudget allows no disruption) is not retried: ``on_refused(reason)`` is awaited
    and False returned.
    """
    if note:
        await annotate(core, namespace=namespace, name=name, note=note, key=annotation)
    body = eviction_body(namespace=namespace, name=name, uid=uid)
    delay = first_delay_s
    while True:
        try:
            await _post(core, body)
            log.info("evicted", allocation_id=allocation_id, pod=f"{namespace}/{name}")
            return True
        except ApiException as exc:
            if exc.status in GONE_STATUSES:
                log.info("eviction_target_gone", allocation_id=allocation_id, pod=f"{namespace}/{name}",
                         status=exc.status)
                return False
            if exc.status == 429 and on_refused is not None:
                log.info("eviction_refused_move_cancelled", allocation_id=allocation_id, pod=f"{namespace}/{name}",
                         reason=str(exc.reason)[:200])
                await on_refused(f"eviction refused (429): {str(exc.reason)[:200]}")
                return False
            retryable = exc.status == 429 or exc.status >= 500
            if not retryable:
                delay = max_delay_s
            (log.info if exc.status == 429 else log.warning if retryable else log.error)(
                "eviction_refused", allocation_id=allocation_id, pod=f"{namespace}/{name}", status=exc.status,
                reason=str(exc.reason)[:200], retry_in_s=delay)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("eviction_failed", allocation_id=allocation_id, pod=f"{namespace}/{name}",
                        error=repr(exc), retry_in_s=delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, max_delay_s)
