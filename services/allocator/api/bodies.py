"""Checked values of write bodies and path segments: names, quantities, quotas, shares, pool settings.

Quantities are Kubernetes strings (``"20"`` TFLOPS, ``"4Gi"`` VRAM) or plain non-negative
numbers, bounded once scaled (milli-TFLOPS, bytes) by the message contract's bounds
(:mod:`events.bounds`: per GPU for requests and limits, the quota envelope for quota amounts), as
are names, counts and weights; the writer checks the whole intent with ``events.guard`` before
publishing. Every refusal is ApiError(400) naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from events import bounds, names
from events.defrag import MAX_DEFRAG_DURATION_S, MAX_DEFRAG_MOVES
from events.durations import go_duration_s
from events.quantity import QuantityError, format_bytes, format_milli, parse
from events.values import (
    ENFORCEMENT_BY_NAME,
    ENFORCEMENT_MODES,
    ISOLATION_POLICIES,
    MAX_TOPOLOGY_TIER,
    PREEMPTION_SCOPES,
    TOPOLOGY_MODES,
    DefragSchedule,
    Enforcement,
    PoolConfig,
    QuotaAmount,
    QuotaSpec,
    Resources,
    ShareAmount,
    SharePool,
    ShareSpec,
)
from services.allocator.api.bounds import ApiError
from services.allocator.domain.defrag_schedule import check_schedule

MAX_ID_CHARS = bounds.MAX_ID_LENGTH


def name(text: str, *, field: str, limit: int) -> str:
    """A non-empty printable name of at most ``limit`` characters."""
    if not text or len(text) > limit or not text.isprintable():
        raise ApiError(400, f"{field} must be 1 to {limit} printable characters", field=field)
    return text


def namespace(text: str, *, field: str = "namespace") -> str:
    """``text`` when it is a Kubernetes namespace name (an RFC 1123 DNS label, :mod:`events.names`);
    else 400 naming ``field``."""
    return _named("namespace", text, field=field)


def share_name(text: str, *, field: str = "name") -> str:
    """``text`` when it is a valid share name (an RFC 1123 DNS subdomain, as a GPUShare's name);
    else 400 naming ``field``."""
    return _named("share", text, field=field)


def pool_name(text: str, *, field: str = "pool") -> str:
    """``text`` when it is a valid pool name (an RFC 1123 DNS subdomain, :mod:`events.names`: not
    ``" "`` or ``a/b``); else 400 naming ``field``."""
    return _named("pool", text, field=field)


def _named(kind: names.NameKind, text: str, *, field: str) -> str:
    try:
        return names.check(kind, text, field=field)
    except names.InvalidName as exc:
        raise ApiError(400, str(exc), field=field) from exc


def only(body: dict[str, Any], allowed: Iterable[str], *, field: str) -> None:
    """Refuse keys of ``body`` outside ``allowed``."""
    extra = sorted(str(k) for k in body if k not in set(allowed))
    if extra:
        raise ApiError(400, f"unknown field {extra[0][:64]!r} in {field}; expected {', '.join(allowed)}",
                       field=f"{field}.{extra[0][:64]}")


def quantity(raw: Any, *, field: str, scale: int, bound: int) -> int:
    """A non-negative quantity times ``scale`` (1000: milli, 1: bytes), rounded up, at most ``bound``."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise ApiError(400, f"{field} must be a quantity string such as \"20\" or \"4Gi\"", field=field)
    try:
        value = parse(str(raw)) if not isinstance(raw, float) or math.isfinite(raw) else Decimal("NaN")
    except (QuantityError, ArithmeticError) as exc:  # ArithmeticError: an exponent past Decimal's range
        raise ApiError(400, f"{field}: invalid quantity {str(raw)[:64]!r}", field=field) from exc
    if not value.is_finite() or value < 0 or value.adjusted() > 20:
        raise ApiError(400, f"{field} must be a finite non-negative quantity, got {str(raw)[:64]!r}", field=field)
    scaled = int((value * scale).to_integral_value(rounding="ROUND_CEILING"))
    if scaled > bound:
        most = format_bytes(bound) if scale == 1 else format_milli(bound - bound % scale)
        raise ApiError(400, f"{field} {str(raw)[:64]!r} is above gpuledger's bound of {most}", field=field)
    return scaled


def resources(raw: Any, *, field: str) -> Resources:
    """``{"tflops", "vram"}`` (both optional, 0 when absent) as Resources (milli-TFLOPS, bytes)."""
    if not isinstance(raw, dict):
        raise ApiError(400, f"{field} must be an object {{\"tflops\", \"vram\"}}", field=field)
    only(raw, ("tflops", "vram"), field=field)
    return Resources(
        milli_tflops=quantity(raw.get("tflops", 0), field=f"{field}.tflops", scale=1000, bound=bounds.MAX_MILLI_TFLOPS),
        vram_bytes=quantity(raw.get("vram", 0), field=f"{field}.vram", scale=1, bound=bounds.MAX_VRAM_BYTES))


def resize_sides(body: dict[str, Any], *, request: Resources | None, limit: Resources | None
                 ) -> tuple[Resources, Resources]:
    """The (request, limit) of a resize body ``{"request": {"tflops", "vram"}, "limit": {...}}``
    against the live allocation's ``request`` and ``limit`` (None: no live allocation).

    One rule for the HTTP API and ``gpuledger resize`` (which sends only what it was given): what
    the body leaves out is kept, a whole side or one dimension of it; a TFLOPS value given replaces
    a compute-percent share. A limit left out is never lowered to the new request: a request above
    the kept limit is refused by the allocator, naming both in TFLOPS (TensorFusion's
    AdjustAllocation likewise takes request and limit separately). Raises ApiError(400) naming
    the field of a bad value."""
    only(body, ("request", "limit"), field="body")
    if body.get("request") is None and body.get("limit") is None:
        raise ApiError(400, "give request and/or limit, each {\"tflops\", \"vram\"}", field="request")
    sides = []
    for side, current in (("request", request), ("limit", limit)):
        raw = body.get(side)
        if raw is None:
            sides.append(current or Resources())
            continue
        parsed = resources(raw, field=side)
        sides.append(parsed if current is None else Resources(
            milli_tflops=parsed.milli_tflops if "tflops" in raw else current.milli_tflops,
            compute_milli_percent=0 if "tflops" in raw else current.compute_milli_percent,
            vram_bytes=parsed.vram_bytes if "vram" in raw else current.vram_bytes))
    return sides[0], sides[1]


def _amount(raw: Any, *, field: str) -> QuotaAmount | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ApiError(400, f"{field} must be an object {{\"tflops\", \"vram\"}} or null", field=field)
    only(raw, ("tflops", "vram"), field=field)
    tflops, vram = raw.get("tflops"), raw.get("vram")
    return QuotaAmount(
        milli_tflops=None if tflops is None else quantity(tflops, field=f"{field}.tflops", scale=1000,
                                                          bound=bounds.MAX_QUOTA_MILLI_TFLOPS),
        vram_bytes=None if vram is None else quantity(vram, field=f"{field}.vram", scale=1,
                                                      bound=bounds.MAX_QUOTA_VRAM_BYTES))


def _count(raw: Any, *, field: str, low: int = 0, high: int = bounds.MAX_COUNT) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or not low <= raw <= high:
        raise ApiError(400, f"{field} must be an integer from {low} to {high}, got {str(raw)[:64]!r}", field=field)
    return raw


_QUOTA_AMOUNTS = ("total_requests", "total_limits", "max_requests", "max_limits")
_QUOTA_FIELDS = (*_QUOTA_AMOUNTS, "max_workers", "max_gpu_count", "alert_threshold_percent",
                 "default_requests", "default_limits")


def quota(body: dict[str, Any]) -> QuotaSpec:
    """A QuotaSpec from the ``quota`` shape of GET /api/v1/quotas (amounts ``{"tflops", "vram"}``)."""
    only(body, _QUOTA_FIELDS, field="body")
    amount = {k: _amount(body.get(k), field=k) for k in _QUOTA_AMOUNTS}
    default = {k: resources(body[k], field=k) if body.get(k) is not None else None
               for k in ("default_requests", "default_limits")}
    alert = _count(body.get("alert_threshold_percent"), field="alert_threshold_percent", high=100)
    return QuotaSpec(total_requests=amount["total_requests"], total_limits=amount["total_limits"],
                     max_requests=amount["max_requests"], max_limits=amount["max_limits"],
                     default_requests=default["default_requests"], default_limits=default["default_limits"],
                     max_workers=_count(body.get("max_workers"), field="max_workers"),
                     max_gpu_count=_count(body.get("max_gpu_count"), field="max_gpu_count"),
                     alert_threshold_percent=95 if alert is None else alert)


_SHARE_FIELDS = ("namespaces", "parent", "weight", "pools")
_SHARE_POOL_FIELDS = ("pool", "guaranteed", "borrowing_limit", "lending_limit")
_SHARE_AMOUNT_FIELDS = ("tflops", "vram", "gpus")


def share_amount(raw: Any, *, field: str) -> ShareAmount | None:
    """``{"tflops", "vram", "gpus"}`` (each optional: a resource left out or null is not set) as a
    ShareAmount (milli-TFLOPS, bytes, GPUs) within the quota envelope; None for null."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ApiError(400, f"{field} must be an object {{\"tflops\", \"vram\", \"gpus\"}} or null", field=field)
    only(raw, _SHARE_AMOUNT_FIELDS, field=field)
    tflops, vram = raw.get("tflops"), raw.get("vram")
    return ShareAmount(
        milli_tflops=None if tflops is None else quantity(tflops, field=f"{field}.tflops", scale=1000,
                                                          bound=bounds.MAX_QUOTA_MILLI_TFLOPS),
        vram_bytes=None if vram is None else quantity(vram, field=f"{field}.vram", scale=1,
                                                      bound=bounds.MAX_QUOTA_VRAM_BYTES),
        gpus=_count(raw.get("gpus"), field=f"{field}.gpus"))


def share(body: dict[str, Any]) -> ShareSpec:
    """A ShareSpec from the ``spec`` shape of GET /api/v1/shares/{name}: ``namespaces`` (namespace
    names), ``parent`` (a share name or ""), ``weight`` (1..1000), ``pools`` (each ``{"pool",
    "guaranteed", "borrowing_limit", "lending_limit"}``, amounts as :func:`share_amount`). Whether
    it fits the other shares (a namespace in two, an unknown parent) the allocator decides."""
    only(body, _SHARE_FIELDS, field="body")
    raw_namespaces = [] if body.get("namespaces") is None else body["namespaces"]
    if not isinstance(raw_namespaces, list) or len(raw_namespaces) > bounds.MAX_LIST:
        raise ApiError(400, f"namespaces must be a list of at most {bounds.MAX_LIST} namespace names",
                       field="namespaces")
    spaces = tuple(namespace(str(n) if isinstance(n, str) else repr(n)[:64], field=f"namespaces.{i}")
                   for i, n in enumerate(raw_namespaces))
    repeated = sorted({n for n in spaces if spaces.count(n) > 1})
    if repeated:
        raise ApiError(400, f"namespace {repeated[0]!r} appears twice in namespaces", field="namespaces")
    parent = "" if body.get("parent") is None else body["parent"]
    if not isinstance(parent, str):
        raise ApiError(400, f"parent must be a share name or empty, got {str(parent)[:64]!r}", field="parent")
    if parent:
        share_name(parent, field="parent")
    weight = _count(body.get("weight", 1), field="weight", low=1, high=1000)
    raw_pools = [] if body.get("pools") is None else body["pools"]
    if not isinstance(raw_pools, list) or len(raw_pools) > bounds.MAX_LIST:
        raise ApiError(400, f"pools must be a list of at most {bounds.MAX_LIST} objects {{\"pool\", "
                       "\"guaranteed\", \"borrowing_limit\", \"lending_limit\"}", field="pools")
    terms = []
    for i, raw in enumerate(raw_pools):
        field = f"pools.{i}"
        if not isinstance(raw, dict):
            raise ApiError(400, f"{field} must be an object {{\"pool\", \"guaranteed\", ...}}", field=field)
        only(raw, _SHARE_POOL_FIELDS, field=field)
        if not isinstance(raw.get("pool"), str):
            raise ApiError(400, f"{field}.pool: a pool name is required, got {str(raw.get('pool'))[:64]!r}",
                           field=f"{field}.pool")
        terms.append(SharePool(pool=pool_name(raw["pool"], field=f"{field}.pool"),
                               guaranteed=share_amount(raw.get("guaranteed"), field=f"{field}.guaranteed")
                               or ShareAmount(),
                               borrowing_limit=share_amount(raw.get("borrowing_limit"),
                                                            field=f"{field}.borrowing_limit"),
                               lending_limit=share_amount(raw.get("lending_limit"), field=f"{field}.lending_limit")))
    seen = [t.pool for t in terms]
    twice = sorted({p for p in seen if seen.count(p) > 1})
    if twice:
        raise ApiError(400, f"pool {twice[0]!r} appears twice in pools; give one entry per pool", field="pools")
    return ShareSpec(namespaces=spaces, parent=parent, weight=weight or 1, pools=tuple(terms))


_POOL_FIELDS = ("placement", "vram_weight", "tflops_weight", "max_workers_per_node", "preemption", "isolation_policy",
                "topology", "max_topology_tier", "enforcement", "fair_share_half_life_s", "reclaim_min_runtime_s",
                "reclaim_max_per_minute", "defrag")
_FAIR_SHARE_FIELDS = ("fair_share_half_life_s", "reclaim_min_runtime_s", "reclaim_max_per_minute")
_DEFRAG_FIELDS = ("schedule", "timezone", "max_duration", "max_moves", "max_share_of_namespace", "enabled")


def defrag_schedule(raw: Any) -> DefragSchedule | None:
    """A pool's ``defrag`` object (TensorFusion NodeDefragConfig): ``schedule`` (5-field cron, required),
    ``timezone`` (IANA, default UTC), ``max_duration`` (Go duration, default 2h, at most 24h),
    ``max_moves`` (default 10), ``max_share_of_namespace`` (percent), ``enabled`` (default true);
    null removes it. Raises ApiError(400) naming ``defrag.<field>``."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ApiError(400, "defrag must be an object with a cron schedule", field="defrag")
    only(raw, _DEFRAG_FIELDS, field="defrag")
    schedule, zone = raw.get("schedule"), raw.get("timezone", "UTC")
    if not isinstance(schedule, str) or not schedule.strip():
        raise ApiError(400, 'defrag.schedule must be a 5-field cron expression such as "0 3 * * *"',
                       field="defrag.schedule")
    if not isinstance(zone, str) or not zone or len(zone) > bounds.MAX_NAME_LENGTH:
        raise ApiError(400, "defrag.timezone must be an IANA time zone such as UTC", field="defrag.timezone")
    duration = raw.get("max_duration", "2h")
    seconds = go_duration_s(duration) if isinstance(duration, str) and len(duration) <= 64 else None
    if seconds is None or not 1 <= seconds <= MAX_DEFRAG_DURATION_S:
        raise ApiError(400, 'defrag.max_duration must be a duration from 1s to 24h such as "2h"',
                       field="defrag.max_duration")
    moves = _count(raw.get("max_moves", 10), field="defrag.max_moves", low=1, high=MAX_DEFRAG_MOVES)
    share = raw.get("max_share_of_namespace", 100)
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 100:
        raise ApiError(400, "defrag.max_share_of_namespace must be a percentage from 0 to 100",
                       field="defrag.max_share_of_namespace")
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ApiError(400, "defrag.enabled must be true or false", field="defrag.enabled")
    result = DefragSchedule(schedule=schedule.strip()[:bounds.MAX_NAME_LENGTH], timezone=zone,
                            max_duration_s=int(seconds), max_moves=moves or 10,
                            max_share_of_namespace_pct=float(share), enabled=enabled)
    problem = check_schedule(result)
    if problem is not None:
        raise ApiError(400, problem[2], field=problem[0].removeprefix("config."))
    return result


def _enforcement(body: dict[str, Any], current: Enforcement) -> Enforcement:
    value = body.get("enforcement", current)
    if isinstance(value, str) and value in ENFORCEMENT_BY_NAME:
        return ENFORCEMENT_BY_NAME[value]
    raise ApiError(400, f"enforcement must be one of {', '.join(ENFORCEMENT_MODES)}", field="enforcement")


def _choice(body: dict[str, Any], key: str, known: tuple[str, ...], current: str) -> str:
    value = body.get(key, current)
    if value not in known:
        raise ApiError(400, f"{key} must be one of {', '.join(known)}", field=key)
    return str(value)


def pool_config(body: dict[str, Any], current: PoolConfig) -> PoolConfig:
    """``current`` (the pool's settings, or the defaults for a pool not configured yet) with the
    fields ``body`` gives replaced: a field left out keeps its value, as ``gpuledger pool
    configure`` does; null resets ``max_workers_per_node``, ``max_topology_tier`` and the fair-share
    three to their defaults and removes ``defrag``. Weights finite in [0, events.bounds.MAX_WEIGHT],
    ``placement`` a strategy name (the allocator checks it), ``isolation_policy``/``topology`` known
    values and ``max_topology_tier`` 0-3 (docs/allocation.md), ``enforcement`` one of ``none``,
    ``hami-core``, ``tensor-fusion`` (docs/runtime.md), the fair-share settings
    ``fair_share_half_life_s``, ``reclaim_min_runtime_s`` (seconds) and ``reclaim_max_per_minute``
    (whole numbers >= 0, 0 their default: no decay, reclaim at once, unbounded; docs/allocation.md
    "Fair share"), ``defrag`` a schedule (:func:`defrag_schedule`)."""
    only(body, _POOL_FIELDS, field="body")
    placement = body.get("placement", current.placement)
    if not isinstance(placement, str) or not 0 < len(placement) <= bounds.MAX_LABEL_VALUE_LENGTH:
        raise ApiError(400, "placement must be a strategy name", field="placement")
    preemption = body.get("preemption", current.preemption)
    if preemption not in PREEMPTION_SCOPES:
        raise ApiError(400, f"preemption must be one of {', '.join(PREEMPTION_SCOPES)}", field="preemption")
    weights: dict[str, float] = {}
    for key in ("vram_weight", "tflops_weight"):
        raw = body.get(key, getattr(current, key))
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0 <= raw <= bounds.MAX_WEIGHT:
            raise ApiError(400, f"{key} must be a number from 0 to {bounds.MAX_WEIGHT:g}", field=key)
        weights[key] = float(raw)
    workers = _count(body.get("max_workers_per_node", current.max_workers_per_node), field="max_workers_per_node")
    tier = _count(body.get("max_topology_tier", current.max_topology_tier), field="max_topology_tier",
                  high=MAX_TOPOLOGY_TIER)
    fair = {key: _count(body.get(key, getattr(current, key)), field=key) or 0 for key in _FAIR_SHARE_FIELDS}
    return PoolConfig(placement=placement, max_workers_per_node=workers or 0, preemption=preemption,
                      vram_weight=weights["vram_weight"], tflops_weight=weights["tflops_weight"],
                      isolation_policy=_choice(body, "isolation_policy", ISOLATION_POLICIES, current.isolation_policy),
                      topology=_choice(body, "topology", TOPOLOGY_MODES, current.topology),
                      max_topology_tier=MAX_TOPOLOGY_TIER if tier is None else tier,
                      enforcement=_enforcement(body, current.enforcement),
                      fair_share_half_life_s=fair["fair_share_half_life_s"],
                      reclaim_min_runtime_s=fair["reclaim_min_runtime_s"],
                      reclaim_max_per_minute=fair["reclaim_max_per_minute"],
                      defrag=defrag_schedule(body["defrag"]) if "defrag" in body else current.defrag)
