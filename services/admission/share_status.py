"""GPUShare status: the admission side writes the allocator's share figures to the objects.

The figures and where a share stands against its guarantee belong to the allocator (its read side,
services/allocator/api/share_status.py, served by ``GET /api/v1/shares``; docs/shares.md "What is
shown for a share"); this module only reads that document and writes, by a merge patch of the
``status`` subresource of each GPUShare the watch sees (:class:`watches.ShareTracker`):

- ``status.pools``: one entry per pool the share takes part in, as the allocator lists them:
  ``{pool, guaranteed, used, borrowed, lent, standing}``, each figure ``{tflops, vram, gpus}``
  (TFLOPS and VRAM bytes as canonical Kubernetes quantity strings, GPUs a number: the allocator's
  ``figure_doc``), ``standing`` ``Below``/``At``/``Over`` from the allocator's ``standing``
  (``Over``: its usage exceeds the guarantee in some resource the guarantee sets, i.e. it borrows;
  ``Below``: otherwise under it in some resource; ``At``: neither);
- ``status.conditions``: one ``Ready`` condition (metav1.Condition; Kueue's ClusterQueue and KAI's
  queue report theirs alike): ``True``/``InForce`` when the allocator holds the share with the
  object's spec, ``False``/``Invalid`` when gpuledger cannot read the object (the parse error),
  ``False``/``NotInForce`` when the allocator holds no such share (its SetShare is pending or was
  refused: the allocator's ``intent_rejected`` says why), ``False``/``SpecNotInForce`` when it
  holds another spec (the object's latest change is pending or was refused; the figures are those
  of the spec in force). ``lastTransitionTime`` changes only with the condition's status;
- ``status.lastUpdateTime``: when this status was last written.

A status that would not change is not written. Nothing is written before the watch's first list is
complete; the allocator unreachable skips the round (services.admission.status_writer).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp
import structlog
from kubernetes_asyncio import client

from events.values import ShareSpec
from services.admission import status_writer
from services.admission.share import parse_share
from services.admission.watches import SHARE_GROUP, SHARE_PLURAL, SHARE_VERSION, ShareTracker
from services.podspec import PodSpecError

FetchShares = status_writer.Fetch
log = structlog.get_logger("gpuledger.admission.share_status")
STANDINGS = {"below": "Below", "at": "At", "over": "Over"}
"""The allocator's ``standing`` of a share in a pool -> the word written in ``status.pools[].standing``."""
_FIGURES = ("guaranteed", "used", "borrowed", "lent")
_LIMITS = {"guaranteed": "guaranteed", "borrowing_limit": "borrowingLimit", "lending_limit": "lendingLimit"}


def spec_in_force(name: str, doc: Mapping[str, Any]) -> ShareSpec | None:
    """The events.values.ShareSpec the allocator holds for ``name``, read back from the ``spec`` of
    its share document (the API's PUT shape) as the GPUShare watch reads an object; None when it
    cannot be read (then it is not compared)."""
    spec = doc.get("spec")
    if not isinstance(spec, Mapping):
        return None
    pools = []
    for terms in spec.get("pools") or []:
        pool: dict[str, Any] = {"pool": terms.get("pool")}
        for key, field in _LIMITS.items():
            amount = terms.get(key)
            if isinstance(amount, Mapping):
                pool[field] = {k: v for k, v in amount.items() if v is not None}
        pools.append(pool)
    obj = {"metadata": {"name": name}, "spec": {"namespaces": spec.get("namespaces") or [],
                                                "parent": spec.get("parent") or "",
                                                "weight": spec.get("weight", 1), "pools": pools}}
    try:
        return parse_share(obj)[1]
    except PodSpecError:
        return None


def _ready(name: str, doc: Mapping[str, Any] | None, *, error: str | None,
           wanted: ShareSpec | None) -> tuple[str, str, str]:
    """The Ready condition's (status, reason, message) for the share ``name``."""
    if error is not None:
        return "False", "Invalid", f"gpuledger cannot read this GPUShare: {error}"[:1024]
    if doc is None:
        return ("False", "NotInForce", f"the allocator holds no share {name}: its SetShare is pending or was "
                "refused (the allocator's intent_rejected says why)")
    if wanted is not None and spec_in_force(name, doc) not in (None, wanted):
        return ("False", "SpecNotInForce", "the allocator holds another spec of this share: the latest change is "
                "pending or was refused (the allocator's intent_rejected says why); the figures are the spec's "
                "in force")
    pools = doc.get("pools") or []
    over = [p["pool"] for p in pools if p.get("standing") == "over"]
    below = [p["pool"] for p in pools if p.get("standing") == "below"]
    parts = [f"in force in {len(pools)} pool{'s' if len(pools) != 1 else ''}"]
    if over:
        parts.append(f"over its guarantee (borrowing) in {', '.join(over)}")
    if below:
        parts.append(f"below its guarantee in {', '.join(below)}")
    return "True", "InForce", "; ".join(parts)


def status_patch(obj: Mapping[str, Any], doc: Mapping[str, Any] | None, *, now: datetime, error: str | None = None,
                 wanted: ShareSpec | None = None) -> dict[str, Any] | None:
    """The merge patch writing ``doc`` (an item of GET /api/v1/shares, None when the allocator has no
    such share) into the GPUShare ``obj``'s status (module docstring), or None when nothing changes.
    ``error``: why the object cannot be read (ShareTracker.errors); ``wanted``: the object's
    ShareSpec (ShareTracker.objects), compared with the allocator's when given."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    stamp = status_writer.timestamp(now)
    current = status_writer.current_status(obj)
    status, reason, message = _ready(name, doc, error=error, wanted=wanted)
    pools = [{"pool": p["pool"], **{k: p[k] for k in _FIGURES}, "standing": STANDINGS[p["standing"]]}
             for p in (doc or {}).get("pools") or []]
    conditions = status_writer.conditions_with(current, "Ready", status=status, reason=reason, message=message,
                                               stamp=stamp)
    return status_writer.status_patch(current, {"pools": pools, "conditions": conditions}, stamp=stamp)


def api_reader(session: aiohttp.ClientSession, base_url: str, *, token: str = "") -> FetchShares:
    """A function fetching every item of ``GET {base_url}/api/v1/shares`` by share name (all pages)."""
    return status_writer.page_reader(session, base_url, "/api/v1/shares", key="name", token=token)


async def sync_once(api: client.ApiClient, *, tracker: ShareTracker, fetch: FetchShares,
                    now: datetime | None = None) -> int:
    """Write the status of every GPUShare whose status changed; returns how many were written (0
    before the watch's first list is complete). Raises what ``fetch`` raises (the allocator
    unreachable) and the Kubernetes API's errors other than 404/409/422 (which skip that object)."""
    if not tracker.synced:
        return 0
    docs = await fetch()
    custom, written = client.CustomObjectsApi(api), 0
    for name, obj in sorted(tracker.present.items()):
        body = status_patch(obj, docs.get(name), now=now or datetime.now(UTC), error=tracker.errors.get(name),
                            wanted=tracker.objects.get(name))
        if body is None:
            continue
        answer = await status_writer.write_status(
            lambda: custom.patch_cluster_custom_object_status(  # type: ignore[call-arg]
                SHARE_GROUP, SHARE_VERSION, SHARE_PLURAL, name, body,  # noqa: B023 (awaited at once)
                _content_type="application/merge-patch+json"),
            log=log, event="share_status_skipped", name=name)
        if answer is not None:
            if name in tracker.present:
                tracker.present[name] = answer
            written += 1
    return written


async def sync_forever(api: client.ApiClient, *, tracker: ShareTracker, fetch: FetchShares,
                       period_s: float) -> None:
    """:func:`sync_once` every ``period_s`` seconds (until cancelled); a failed round is logged
    (``share_status_unavailable``) and the next one tries again (status_writer.every)."""
    await status_writer.every(period_s, lambda: sync_once(api, tracker=tracker, fetch=fetch), log=log,
                              event="share_status_unavailable")
