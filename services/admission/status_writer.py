"""The mechanics every status writer of admission shares (GPUResourceQuota: quota_sync; GPUShare:
share_status): read an allocator list by pages, build a merge patch of an object's ``status`` that
is None when nothing would change, keep a Kubernetes-style condition's ``lastTransitionTime``,
write the ``status`` subresource skipping the objects that cannot take it, and repeat every period.

What goes into a status (its shape and the rule of its condition) belongs to each writer; the
figures belong to the allocator (its read API): nothing here computes usage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

Fetch = Callable[[], Awaitable[dict[str, dict[str, Any]]]]
"""Fetches an allocator list: its items by key (a namespace, a share name)."""
SKIPPED = (404, 409, 422)
"""Kubernetes API answers that skip one object (gone, changed meanwhile, refused by its schema)."""
ROUND_ERRORS = (aiohttp.ClientError, ApiException, TimeoutError, KeyError, TypeError)
"""What ends a round without ending the writer: the allocator or the Kubernetes API unavailable,
an answer of an unexpected shape."""


def timestamp(now: datetime) -> str:
    """``now`` as Kubernetes writes times (RFC 3339, UTC, seconds: ``2026-01-01T00:00:00Z``)."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def current_status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj``'s status ({} when it has none or it is not an object)."""
    raw = obj.get("status")
    return raw if isinstance(raw, Mapping) else {}


def conditions_with(current: Mapping[str, Any], kind: str, *, status: str, reason: str, message: str,
                    stamp: str) -> list[dict[str, Any]]:
    """``current``'s conditions with the one of type ``kind`` set first (metav1.Condition's
    ``type``/``status``/``reason``/``message``/``lastTransitionTime``): ``lastTransitionTime`` is
    ``stamp`` only when ``status`` changes (or the condition is new); an unchanged condition is
    kept as it was. Conditions of other types (another writer's) are kept after it."""
    conditions = [dict(c) for c in current.get("conditions") or [] if isinstance(c, Mapping)]
    previous = next((c for c in conditions if c.get("type") == kind), None)
    wanted = {"type": kind, "status": status, "reason": reason, "message": message,
              "lastTransitionTime": stamp}
    if previous is not None and previous.get("status") == status:
        wanted["lastTransitionTime"] = previous.get("lastTransitionTime", stamp)
        if all(previous.get(k) == wanted[k] for k in ("reason", "message")):
            wanted = previous
    return [wanted, *(c for c in conditions if c.get("type") != kind)]


def status_patch(current: Mapping[str, Any], wanted: Mapping[str, Any], *, stamp: str) -> dict[str, Any] | None:
    """The merge patch ``{"status": {**wanted, "lastUpdateTime": stamp}}``, or None when every key
    of ``wanted`` already has that value in ``current`` (the status would not change)."""
    if all(current.get(k) == v for k, v in wanted.items()):
        return None
    return {"status": {**wanted, "lastUpdateTime": stamp}}


def page_reader(session: aiohttp.ClientSession, base_url: str, path: str, *, key: str, token: str = "") -> Fetch:
    """A function fetching every item of ``GET {base_url}{path}`` (all pages: ``limit``/``continue``,
    services/allocator/api/paging.py) by ``item[key]``; raises aiohttp.ClientError for an
    unreachable allocator or an error answer, TimeoutError after 10 s a page."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def fetch() -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        params: dict[str, str] = {"limit": "1000"}
        more = True
        while more:
            async with session.get(f"{base_url.rstrip('/')}{path}", params=params, headers=headers,
                                   timeout=aiohttp.ClientTimeout(total=10)) as response:
                response.raise_for_status()
                page = await response.json()
            found.update({item[key]: item for item in page["items"]})
            more = bool(page.get("continue"))
            params["continue"] = str(page.get("continue"))
        return found

    return fetch


async def write_status(patch: Callable[[], Awaitable[Any]], *, log: Any, event: str,
                       **names: str) -> dict[str, Any] | None:
    """Run ``patch`` (one status subresource merge patch); the object it answers, or None when the
    API server answered 404/409/422 (:data:`SKIPPED`, logged as ``event`` with ``names``: that
    object is skipped). Other ApiExceptions propagate (they end the round)."""
    try:
        written: dict[str, Any] = await patch()
    except ApiException as exc:
        if exc.status not in SKIPPED:
            raise
        log.info(event, status=exc.status, **names)
        return None
    return written


async def every(period_s: float, round_once: Callable[[], Awaitable[object]], *, log: Any, event: str) -> None:
    """``round_once()`` every ``period_s`` seconds until cancelled; a round failing with one of
    :data:`ROUND_ERRORS` is logged (warning ``event``) and the next one tries again: a status is a
    report, so its failures never stop the webhook or the binder."""
    while True:
        try:
            await round_once()
        except ROUND_ERRORS as exc:
            log.warning(event, error=str(exc) or type(exc).__name__)
        await asyncio.sleep(period_s)
