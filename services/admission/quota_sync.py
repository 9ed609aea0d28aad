"""GPUResourceQuota status: the admission side writes the allocator's quota status to the objects.

Usage and the status arithmetic belong to the allocator (its projection,
services/allocator/api/quota_status.py, served as ``status`` in ``GET /api/v1/quotas``); this module
only reads that document and writes it in TensorFusion's shape (api/v1/gpuresourcequota_types.go
``GPUResourceQuotaStatus``; internal/quota/quota_store.go ``SyncQuotasToK8s``): ``status.used``
(``requests``/``limits`` ``{tflops, vram}`` quantities, ``workers``), ``status.availablePercent``
(five strings), ``status.conditions`` (one ``Ready`` condition: ``False``/``AlertThresholdReached`` or
``True``/``CapacitySufficient``) and ``status.lastUpdateTime``, by a merge patch of the ``status``
subresource of the namespace's quota in force (its first by name, :class:`watches.QuotaTracker`).
A status that would not change is not written; ``lastTransitionTime`` changes only with the
condition's status. The allocator unreachable, or a quota it does not know yet, skips that round.
The mechanics (paging, the patch, the condition, the period) are services.admission.status_writer's.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp
import structlog
from kubernetes_asyncio import client

from services.admission import status_writer
from services.admission.watches import GROUP, VERSION, QuotaTracker

PLURAL = "gpuresourcequotas"
FetchQuotas = status_writer.Fetch
log = structlog.get_logger("gpuledger.admission.quota_sync")
_ZERO = {"tflops": "0", "vram": "0"}


def status_patch(obj: Mapping[str, Any], doc: Mapping[str, Any], *, now: datetime) -> dict[str, Any] | None:
    """The merge patch writing ``doc`` (an item of GET /api/v1/quotas) into ``obj``'s status, or
    None when ``doc`` has no status (the allocator has no quota for the namespace) or nothing changes."""
    status, usage = doc.get("status"), doc.get("usage") or {}
    if not status:
        return None
    stamp = status_writer.timestamp(now)
    current = status_writer.current_status(obj)
    conditions = status_writer.conditions_with(
        current, "Ready", status="False" if status["alert"] else "True", reason=status["reason"],
        message=status["message"], stamp=stamp)
    wanted = {"used": {"requests": usage.get("requests") or _ZERO, "limits": usage.get("limits") or _ZERO,
                       "workers": usage.get("workers") or 0},
              "availablePercent": status["available_percent"], "conditions": conditions}
    return status_writer.status_patch(current, wanted, stamp=stamp)


def api_reader(session: aiohttp.ClientSession, base_url: str, *, token: str = "") -> FetchQuotas:
    """A function fetching every item of ``GET {base_url}/api/v1/quotas`` by namespace (all pages)."""
    return status_writer.page_reader(session, base_url, "/api/v1/quotas", key="namespace", token=token)


async def sync_once(api: client.ApiClient, *, tracker: QuotaTracker, fetch: FetchQuotas,
                    now: datetime | None = None) -> int:
    """Write the status of every quota in force whose status changed; returns how many were written.
    Raises what ``fetch`` raises (the allocator unreachable)."""
    docs = await fetch()
    custom, written = client.CustomObjectsApi(api), 0
    for namespace, objects in sorted(tracker.objects.items()):
        name = min(objects)
        doc = docs.get(namespace)
        body = None if doc is None else status_patch(objects[name], doc, now=now or datetime.now(UTC))
        if body is None:
            continue
        answer = await status_writer.write_status(
            lambda: custom.patch_namespaced_custom_object_status(  # type: ignore[call-arg]
                GROUP, VERSION, namespace, PLURAL, name, body,  # noqa: B023 (awaited at once)
                _content_type="application/merge-patch+json"),
            log=log, event="quota_status_skipped", namespace=namespace, name=name)
        if answer is not None:
            objects[name] = answer
            written += 1
    return written


async def sync_forever(api: client.ApiClient, *, tracker: QuotaTracker, fetch: FetchQuotas,
                       period_s: float) -> None:
    """:func:`sync_once` every ``period_s`` seconds (until cancelled); a failed round (allocator or
    Kubernetes API unavailable, an unexpected answer) is logged and the next one tries again: the
    status is a report, so its failures never stop the webhook or the binder."""
    await status_writer.every(period_s, lambda: sync_once(api, tracker=tracker, fetch=fetch), log=log,
                              event="quota_status_unavailable")
