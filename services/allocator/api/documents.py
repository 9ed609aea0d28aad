"""JSON documents of the API's resources: pools, nodes, GPUs, allocations, queue entries, quotas, shares.

Pure functions of the projection (and of :mod:`services.allocator.api.reasons` for explanations).
Quantities are canonical Kubernetes strings as in :mod:`services.allocator.api.views` (``"10"``,
``"500m"``, ``"4Gi"``); times ISO-8601 UTC.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime
from typing import Any

import msgspec

from events.quantity import format_bytes, format_milli, percent_text, tflops_text, vram_text
from events.values import QOS_LEVELS, PoolConfig, QuotaAmount, Resources, ShareAmount, ShareSpec
from services.allocator import domain
from services.allocator.api import reasons, share_status, views
from services.allocator.api.quota_status import QuotaStatus, quota_status
from services.allocator.domain import fairshare
from services.allocator.domain.model import GRANTED, QUEUED, AllocationState, GpuState, NodeState, capacity_totals
from services.allocator.domain.state import ClusterState
from services.podspec.device_plan import device_plan, enforcement_of, plan_view


def pool_names(state: ClusterState) -> list[str]:
    """Every pool with a node, a configuration or an allocation, sorted."""
    names = {gpu.pool for gpu in state.gpus.values()} | set(state.pool_nodes) | set(state.pools)
    names |= {a.spec.pool for a in state.allocations.values()}
    return sorted(names)


def pool_doc(state: ClusterState, pool: str) -> dict[str, Any]:
    """One pool: config (strategy and weights), capacity/allocated/available (GPUs discovery no
    longer reports left out: model.capacity_totals), GPUs by phase, nodes, allocations by status,
    queued by QoS."""
    gpus = [g for g in state.gpus.values() if g.pool == pool]
    totals = capacity_totals(gpus)
    lives = [a for a in state.allocations.values() if a.spec.pool == pool]
    queued_by_qos = Counter(a.spec.qos for a in lives if a.status == QUEUED)
    return {
        "name": pool,
        "configured": pool in state.pools,
        "config": pool_config_doc(state.pool_config(pool)),
        "nodes": len(state.pool_nodes.get(pool, ())),
        "gpus": len(gpus),
        "gpus_by_phase": dict(sorted(Counter(g.phase for g in gpus).items())),
        "capacity": views.resources_view(totals.capacity),
        "allocated": views.resources_view(totals.allocated),
        "available": views.resources_view(totals.available),
        "allocations": {GRANTED: sum(a.status == GRANTED for a in lives), QUEUED: sum(queued_by_qos.values())},
        "queued_by_qos": {qos: queued_by_qos.get(qos, 0) for qos in QOS_LEVELS},
    }


def node_doc(state: ClusterState, node: NodeState) -> dict[str, Any]:
    """One node in a list: pool, phase, schedulable, GPU count, capacity/available (without missing
    GPUs), allocation count, and ``idle_since`` (ISO-8601 UTC: when its last granted allocation
    ended or it registered with none; null while one is granted on it)."""
    gpus = [state.gpus[g] for g in node.gpus if g in state.gpus]
    totals = capacity_totals(gpus)
    return {
        "name": node.name, "pool": node.pool, "phase": node.phase, "schedulable": node.schedulable,
        "gpus": len(gpus), "capacity": views.resources_view(totals.capacity),
        "available": views.resources_view(totals.available),
        "allocations": len({a for g in gpus for a in g.charges}),
        "last_heartbeat": node.last_seen.isoformat() if node.last_seen else None,
        "heartbeat_ttl_s": node.heartbeat_ttl_s, "source": node.source,
        "idle_since": node.idle_since.isoformat() if node.idle_since else None,
    }


def node_detail(state: ClusterState, node: NodeState) -> dict[str, Any]:
    """A node with its labels, every GPU (views.gpu_view) and its allocations (views shape)."""
    gpus: list[GpuState] = [state.gpus[g] for g in sorted(node.gpus) if g in state.gpus]
    ids = sorted({a for g in gpus for a in g.charges})
    return {**node_doc(state, node), "labels": dict(node.labels),
            "gpu_list": [views.gpu_view(g, state.allocations) for g in gpus],
            "allocation_list": [allocation_doc(state.allocations[i]) for i in ids if i in state.allocations]}


def allocation_doc(allocation: AllocationState) -> dict[str, Any]:
    """One live allocation: the composed request, status, node, GPUs, reason, times, for a
    partitioned one its partitions (GPU, template, profile id, slots), and for a grant in a pool with
    shares the ``share`` charged and whether it ``borrowed``."""
    view = views.spec_view(allocation.spec)
    view.update(status=allocation.status, node=allocation.node, gpus=list(allocation.gpus),
                reason=allocation.reason, code=allocation.code,
                requested_at=allocation.requested_at.isoformat(),
                granted_at=allocation.granted_at.isoformat() if allocation.granted_at else None)
    if allocation.partitions:
        view["partitions"] = [{"gpu": gpu, **views.partition_view(p)}
                              for gpu, p in zip(allocation.gpus, allocation.partitions, strict=True)]
    if allocation.share:  # granted in a pool with shares (docs/shares.md)
        view.update(share=allocation.share, borrowed=allocation.borrowed)
    return view


def device_doc(state: ClusterState, allocation: AllocationState) -> dict[str, Any] | None:
    """What a granted allocation becomes on its pod (services.podspec.device_plan, shape
    ``plan_view``: enforcement, per-container devices and environment, RuntimeClass, volumes); None
    while queued."""
    if allocation.status != GRANTED:
        return None
    records = {g: state.gpus[g].spec for g in allocation.gpus if g in state.gpus}
    mode = enforcement_of(allocation.spec, state.pool_config(allocation.spec.pool).enforcement)
    return plan_view(device_plan(allocation.spec, enforcement=mode, gpus=tuple(allocation.gpus),
                                 partitions=tuple(allocation.partitions), records=records))


def reason_doc(reason: reasons.Reason) -> dict[str, Any]:
    """A current reason: code, text, quota dimension, filter counts, where it would fit."""
    return {"code": reason.code, "reason": reason.reason, "quota_dimension": reason.quota_dimension,
            "filters": [{"name": f.name, "removed": f.removed} for f in reason.filters],
            "node": reason.node, "gpus": list(reason.gpus)}


def _need(state: ClusterState, allocation: AllocationState, reason: reasons.Reason) -> str:
    """What would have to free up for ``allocation`` to be granted (one sentence)."""
    spec = allocation.spec
    if reason.code == "quota":
        return (f"namespace {spec.namespace}'s quota ({reason.quota_dimension or 'total'}) must allow it: "
                "release or shrink allocations of the namespace, or raise its quota")
    if reason.code == "share":
        return (f"the share terms of namespace {spec.namespace} in pool {spec.pool} must allow it (the reason names "
                "the share, resource and figures): its share's own allocations to shrink, the capacity other shares "
                "keep for their guarantees to be used or lent, or a larger guarantee or borrowing limit "
                "(`gpuledger shares show`, docs/shares.md)")
    if reason.code == "capacity":
        amount = (percent_text(spec.request.compute_milli_percent) if spec.request.compute_milli_percent
                  else tflops_text(spec.request.milli_tflops))
        return (f"{spec.gpu_count} GPU(s) in pool {spec.pool} passing every filter with {amount} "
                f"and {vram_text(spec.request.vram_bytes)} VRAM free each")
    if reason.code == "fits":
        return "nothing: it fits now and is granted at the next queue drain"
    if reason.code == "gang" and spec.gang is not None:
        return (f"the quorum of gang {spec.gang.key} ({spec.gang.quorum} members) present, and room in pool "
                f"{spec.pool} for all of them at once")
    return "it cannot be granted as requested; change the request or the pool"


def pool_config_doc(config: PoolConfig) -> dict[str, Any]:
    """A pool's settings as ``PUT /api/v1/pools/{pool}`` takes them (its ``defrag`` schedule in the
    body's form, ``max_duration`` a duration such as ``7200s``; null when none)."""
    doc = msgspec.structs.asdict(config)
    schedule = config.defrag
    doc["defrag"] = None if schedule is None else {
        "schedule": schedule.schedule, "timezone": schedule.timezone, "max_duration": f"{schedule.max_duration_s}s",
        "max_moves": schedule.max_moves, "max_share_of_namespace": schedule.max_share_of_namespace_pct,
        "enabled": schedule.enabled}
    return doc


def explanation(state: ClusterState, allocation: AllocationState, reason: reasons.Reason | None,
                now: datetime | None = None, scheduler: domain.Scheduler | None = None) -> dict[str, Any]:
    """The live explanation: for a queued allocation its current reason (with filters, quota
    dimension, what would have to free up and, given ``now``, what it would take then: the victims
    of a priority preemption or a reclaim, or why no priority preemption exists), for a granted
    one where and how it was placed. ``scheduler``: the reader's kept explainer
    (:func:`reasons.explainer`; None: a fresh one, which indexes the state)."""
    if allocation.status == QUEUED and reason is not None:
        doc = {**reason_doc(reason), "queued_reason": allocation.reason,
               "would_need": _need(state, allocation, reason)}
        standing = reasons.fair_standing(state, allocation, scheduler)
        if standing is not None:
            doc["fair_share"] = fair_share_doc(standing)
        if now is not None:
            taken = reasons.taken_now(state, allocation.spec, now, scheduler)
            doc["preemption"] = (views.taken_view(*taken) if taken is not None else
                                 views.preemption_view(reasons.preemption_now(state, allocation.spec, now, scheduler)))
        return doc
    config = state.pool_config(allocation.spec.pool)
    doc = {"code": "granted", "node": allocation.node, "gpus": list(allocation.gpus),
           "charges": [views.resources_view(c) for c in allocation.charges],
           "strategy": config.placement,
           "reason": (f"granted on {allocation.node} ({', '.join(allocation.gpus)}) by the "
                      f"{config.placement} strategy of pool {allocation.spec.pool}" + _partitions_text(allocation)),
           "filters": [{"name": f.name, "removed": f.removed}
                       for f in reasons.filters_now(state, allocation.spec, scheduler)]}
    moving = _defrag_note(state, allocation)
    if moving is not None:
        doc["defrag"], doc["reason"] = moving[0], moving[1]
    return doc


def _defrag_note(state: ClusterState, allocation: AllocationState) -> tuple[dict[str, Any], str] | None:
    """What the pool's last defrag campaign did with ``allocation``: the source of an open move (its
    target reserved, its pod being evicted) or the replacement granted a move's reserved GPUs; else None."""
    aid = allocation.spec.allocation_id
    campaign = state.campaigns.get(allocation.spec.pool)
    if campaign is None:
        return None
    r = campaign.reservations.get(aid)
    if r is not None:
        return ({"campaign_id": campaign.campaign_id, "role": "source", "to": {"node": r.target_node,
                 "gpus": list(r.target_gpus)}, "expires_at": r.expires_at.isoformat()},
                f"granted on {allocation.node} ({', '.join(allocation.gpus)}); defrag campaign {campaign.campaign_id} "
                f"moves it: {r.target_node} ({', '.join(r.target_gpus)}) is reserved for its replacement until "
                f"{r.expires_at.isoformat()}, and its pod is evicted")
    done = next((o for o in campaign.outcomes if o.replacement_id == aid), None)
    if done is None:
        return None
    return ({"campaign_id": campaign.campaign_id, "role": "replacement", "moved": done.allocation_id,
             "from": done.source_node},
            f"granted on {allocation.node} ({', '.join(allocation.gpus)}): the GPUs defrag campaign "
            f"{campaign.campaign_id} reserved when it moved {done.allocation_id} of the same workload off "
            f"{done.source_node}")


def _partitions_text(allocation: AllocationState) -> str:
    """``; partitions: g0 3g.40gb at slots 4-7, ...`` for a partitioned allocation, else ""."""
    if not allocation.partitions:
        return ""
    pairs = zip(allocation.gpus, allocation.partitions, strict=True)
    held = [f"{gpu} {p.template} at slots {p.start}-{p.end - 1}" for gpu, p in pairs]
    return "; partitions: " + ", ".join(held)


def queue_entry(allocation: AllocationState, rank: int, reason: reasons.Reason,
                standing: fairshare.Standing | None = None) -> dict[str, Any]:
    """A waiting request: its place in grant order (0 first), the request and its current reason;
    in a pool with shares, ``fair_share``: where its share stands (:func:`fair_share_doc`)."""
    doc = {**allocation_doc(allocation), "rank": rank, "queued_reason": allocation.reason,
           "current": reason_doc(reason), "reason": reason.reason, "code": reason.code}
    if standing is not None:
        doc["fair_share"] = fair_share_doc(standing)
    return doc


def _dominant_doc(found: fairshare.Dominant | None) -> dict[str, Any] | None:
    if found is None:
        return None
    return {"share": found.share, "dominant_share": round(found.value, 6), "resource": found.resource,
            "weight": found.weight, "weighted": round(found.weighted, 6)}


def fair_share_doc(standing: fairshare.Standing) -> dict[str, Any]:
    """A request's fair-share standing: ``share`` ("" for none), ``mine`` and ``ahead`` (``{"share",
    "dominant_share", "resource", "weight", "weighted"}`` or null), ``shares_ahead``, ``level``
    ("share" or "parent": whose dominant shares decided) and ``text`` (docs/allocation.md
    "Fair-share ordering")."""
    return {"share": standing.share, "mine": _dominant_doc(standing.mine), "ahead": _dominant_doc(standing.ahead),
            "shares_ahead": standing.shares_ahead, "level": standing.level, "text": standing.text}


def _amount(amount: QuotaAmount | None) -> dict[str, str | None] | None:
    if amount is None:
        return None
    return {"tflops": None if amount.milli_tflops is None else format_milli(amount.milli_tflops),
            "vram": None if amount.vram_bytes is None else format_bytes(amount.vram_bytes)}


def quota_doc(state: ClusterState, namespace: str) -> dict[str, Any]:
    """A namespace's quota (``null`` when none), its usage (requests, limits, workers) and the
    quota's status (``null`` without a quota; :func:`status_doc`)."""
    quota = state.quotas.get(namespace)
    usage = state.usage.get(namespace)
    spec = None
    if quota is not None:
        spec = {"total_requests": _amount(quota.total_requests), "total_limits": _amount(quota.total_limits),
                "max_requests": _amount(quota.max_requests), "max_limits": _amount(quota.max_limits),
                "max_workers": quota.max_workers, "max_gpu_count": quota.max_gpu_count,
                "alert_threshold_percent": quota.alert_threshold_percent}
    used = {"requests": views.resources_view(Resources(milli_tflops=usage.requests_milli_tflops,
                                                       vram_bytes=usage.requests_vram_bytes)) if usage else None,
            "limits": views.resources_view(Resources(milli_tflops=usage.limits_milli_tflops,
                                                     vram_bytes=usage.limits_vram_bytes)) if usage else None,
            "workers": usage.workers if usage else 0}
    return {"namespace": namespace, "quota": spec, "usage": used,
            "status": None if quota is None else status_doc(quota_status(quota, usage))}


def status_doc(status: QuotaStatus) -> dict[str, Any]:
    """A quota's status (services.allocator.api.quota_status): available percent per dimension
    (TensorFusion's strings), threshold, whether and where the alert is reached, Ready's reason/message."""
    return {"available_percent": status.available_percent, "alert_threshold_percent": status.threshold,
            "alert": status.alert, "alerts": list(status.alerts), "reason": status.reason, "message": status.message}


def summary(state: ClusterState) -> dict[str, Any]:
    """The small ``/api/v1/status``: position, per-pool totals, node/GPU counts by phase, allocations,
    and per share and pool its figures (docs/shares.md; an empty list without shares)."""
    statuses = Counter(a.status for a in state.allocations.values())
    return {
        "position": state.position,
        "pools": [{key: doc[key] for key in ("name", "nodes", "gpus", "capacity", "available", "allocations")}
                  for doc in (pool_doc(state, p) for p in pool_names(state))],
        "nodes_by_phase": dict(sorted(Counter(n.phase for n in state.nodes.values()).items())),
        "gpus_by_phase": dict(sorted(Counter(g.phase for g in state.gpus.values()).items())),
        "allocations": {GRANTED: statuses.get(GRANTED, 0), QUEUED: statuses.get(QUEUED, 0)},
        "shares": [{"share": f.share, "pool": f.pool, "parent": state.shares[f.share].parent or None,
                    "guaranteed": figure_doc(f.guaranteed), "used": figure_doc(f.used),
                    "borrowed": figure_doc(f.borrowed), "lent": figure_doc(f.lent), "fair_share": figure_doc(f.fair),
                    "waiting": f.waiting}
                   for figures in share_status.all_figures(state).values() for f in figures],
    }


def share_amount_doc(amount: ShareAmount | None) -> dict[str, Any] | None:
    """A share's terms amount ``{"tflops", "vram", "gpus"}`` (null for a resource not set; the
    whole amount null when absent, i.e. an unbounded limit): the shape PUT /api/v1/shares takes."""
    if amount is None:
        return None
    return {"tflops": None if amount.milli_tflops is None else format_milli(amount.milli_tflops),
            "vram": None if amount.vram_bytes is None else format_bytes(amount.vram_bytes),
            "gpus": amount.gpus}


def figure_doc(value: share_status.Vector) -> dict[str, Any]:
    """A figure ``{"tflops", "vram", "gpus"}``: TFLOPS rounded down to milli-TFLOPS, VRAM to bytes
    (canonical quantity strings), GPUs a whole number or rounded to hundredths."""
    gpus = value[2]
    return {"tflops": format_milli(math.floor(value[0])), "vram": format_bytes(math.floor(value[1])),
            "gpus": int(gpus) if gpus.denominator == 1 else round(float(gpus), 2)}


def share_spec_doc(spec: ShareSpec) -> dict[str, Any]:
    """A share as PUT /api/v1/shares/{name} takes it."""
    return {"namespaces": list(spec.namespaces), "parent": spec.parent, "weight": spec.weight,
            "pools": [{"pool": t.pool, "guaranteed": share_amount_doc(t.guaranteed),
                       "borrowing_limit": share_amount_doc(t.borrowing_limit),
                       "lending_limit": share_amount_doc(t.lending_limit)} for t in spec.pools]}


def share_doc(state: ClusterState, name: str, figures: list[share_status.PoolFigures]) -> dict[str, Any]:
    """One share (docs/shares.md): name, parent, children, namespaces, weight, ``spec`` and per
    pool its terms and figures (share_status)."""
    spec = state.shares[name]
    return {"name": name, "parent": spec.parent or None,
            "children": [n for n, s in sorted(state.shares.items()) if s.parent == name],
            "namespaces": list(spec.namespaces), "weight": spec.weight, "spec": share_spec_doc(spec),
            "pools": [{"pool": f.pool, "guaranteed": figure_doc(f.guaranteed),
                       "borrowing_limit": share_amount_doc(f.terms.borrowing_limit),
                       "lending_limit": share_amount_doc(f.terms.lending_limit),
                       "used": figure_doc(f.used), "borrowed": figure_doc(f.borrowed), "lent": figure_doc(f.lent),
                       "fair_share": figure_doc(f.fair), "below_guarantee": list(f.below),
                       "above_guarantee": list(f.above), "standing": standing(f), "waiting": f.waiting}
                      for f in figures]}


def standing(figures: share_status.PoolFigures) -> str:
    """Where a share stands against its guarantee in a pool: ``over`` when its usage exceeds the
    guarantee in some resource (``above``: it is borrowing, docs/allocation.md "Fair share"), else
    ``below`` when it uses less than the guarantee in some resource, else ``at``."""
    return "over" if figures.above else "below" if figures.below else "at"
