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
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp
import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.admission.watches import GROUP, VERSION, QuotaTracker

PLURAL = "gpuresourcequotas"
FetchQuotas = Callable[[], Awaitable[dict[str, dict[str, Any]]]]
log = structlog.get_logger("gpuledger.admission.quota_sync")
_ZERO = {"tflops": "0", "vram": "0"}


def _ready(status: Mapping[str, Any], previous: Mapping[str, Any] | None, now: str) -> dict[str, Any]:
    value = "False" if status["alert"] else "True"
    unchanged = previous is not None and previous.get("status") == value
    return {"type": "Ready", "status": value, "reason": status["reason"], "message": status["message"],
            "lastTransitionTime": previous.get("lastTransitionTime", now) if previous and unchanged else now}


def status_patch(obj: Mapping[str, Any], doc: Mapping[str, Any], *, now: datetime) -> dict[str, Any] | None:
    """The merge patch writing ``doc`` (an item of GET /api/v1/quotas) into ``obj``'s status, or
    None when ``doc`` has no status (the allocator has no quota for the namespace) or nothing changes."""
    status, usage = doc.get("status"), doc.get("usage") or {}
    if not status:
        return None
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    raw = obj.get("status")
    current: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    conditions = [c for c in current.get("conditions") or [] if isinstance(c, Mapping)]
    previous = next((c for c in conditions if c.get("type") == "Ready"), None)
    ready = _ready(status, previous, stamp)
    if previous is not None and all(previous.get(k) == ready[k] for k in ("status", "reason", "message")):
        ready = dict(previous)
    wanted = {"used": {"requests": usage.get("requests") or _ZERO, "limits": usage.get("limits") or _ZERO,
                       "workers": usage.get("workers") or 0},
              "availablePercent": status["available_percent"],
              "conditions": [ready, *(c for c in conditions if c.get("type") != "Ready")]}
    if all(current.get(k) == v for k, v in wanted.items()):
        return None
    return {"status": {**wanted, "lastUpdateTime": stamp}}


def api_reader(session: aiohttp.ClientSession, base_url: str, *, token: str = "") -> FetchQuotas:
    """A function fetching every item of ``GET {base_url}/api/v1/quotas`` by namespace (all pages)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def fetch() -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        params: dict[str, str] = {"limit": "1000"}
        more = True
        while more:
            async with session.get(f"{base_url.rstrip('/')}/api/v1/quotas", params=params, headers=headers,
                                   timeout=aiohttp.ClientTimeout(total=10)) as response:
                response.raise_for_status()
                page = await response.json()
            found.update({item["namespace"]: item for item in page["items"]})
            more = bool(page.get("continue"))
            params["continue"] = str(page.get("continue"))
        return found

    return fetch


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
        try:
            objects[name] = await custom.patch_namespaced_custom_object_status(  # type: ignore[call-arg]
                GROUP, VERSION, namespace, PLURAL, name, body, _content_type="application/merge-patch+json")
        except ApiException as exc:
            if exc.status not in (404, 409, 422):
                raise
            log.info("quota_status_skipped", namespace=namespace, name=name, status=exc.status)
            continue
        written += 1
    return written


async def sync_forever(api: client.ApiClient, *, tracker: QuotaTracker, fetch: FetchQuotas,
                       period_s: float) -> None:
    """:func:`sync_once` every ``period_s`` seconds (until cancelled); a failed round (allocator or
    Kubernetes API unavailable, an unexpected answer) is logged and the next one tries again: the
    status is a report, so its failures never stop the webhook or the binder."""
    while True:
        try:
            await sync_once(api, tracker=tracker, fetch=fetch)
        except (aiohttp.ClientError, ApiException, TimeoutError, KeyError, TypeError) as exc:
            log.warning("quota_status_unavailable", error=str(exc) or type(exc).__name__)
        await asyncio.sleep(period_s)
