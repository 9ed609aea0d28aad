"""Validation of intent payloads beyond their types: what makes a request, quota or pool invalid.

Each check returns ``(field, value, message)`` for the first problem or None; the caller turns
it into AllocationRejected / ResizeRejected / IntentRejected naming the field and value.
"""

from __future__ import annotations

import math

from events import names
from events.bounds import MAX_SHARE_WEIGHT
from events.quantity import percent_text, tflops_text, vram_text
from events.values import (
    ISOLATION_MODES,
    ISOLATION_POLICIES,
    MAX_GPUS_PER_ALLOCATION,
    MAX_TOPOLOGY_TIER,
    PREEMPTION_SCOPES,
    QOS_LEVELS,
    SHARE_RESOURCES,
    TOPOLOGY_MODES,
    AllocationSpec,
    PoolConfig,
    QuotaAmount,
    QuotaSpec,
    Resources,
    ShareAmount,
    SharePool,
    ShareSpec,
)
from services.allocator.domain.units import PERCENT_SCALE

Problem = tuple[str, str, str]


def check_resources(res: Resources, field: str) -> Problem | None:
    """Non-negative amounts, a percent within 0-100 %, never TFLOPS and percent together."""
    for name, text in (("milli_tflops", tflops_text), ("vram_bytes", vram_text),
                       ("compute_milli_percent", percent_text)):
        value = getattr(res, name)
        if value < 0:
            return f"{field}.{name}", str(value), f"{field}.{name} must not be negative, got {text(value)}"
    if res.compute_milli_percent > PERCENT_SCALE:
        value = str(res.compute_milli_percent)
        shown = percent_text(res.compute_milli_percent)
        return f"{field}.compute_milli_percent", value, f"{field} compute percent {shown} is above 100 %"
    if res.milli_tflops and res.compute_milli_percent:
        return field, "tflops+percent", f"{field} sets both TFLOPS and compute percent; they are mutually exclusive"
    return None


def check_request_limit(request: Resources, limit: Resources) -> Problem | None:
    """Both sides valid, and the request not above a non-zero limit in any dimension."""
    problem = check_resources(request, "request") or check_resources(limit, "limit")
    if problem:
        return problem
    for name, what, text in (("milli_tflops", "TFLOPS", tflops_text), ("vram_bytes", "VRAM", vram_text),
                             ("compute_milli_percent", "compute percent", percent_text)):
        req, lim = getattr(request, name), getattr(limit, name)
        if lim and req > lim:
            return f"request.{name}", str(req), (
                f"the {what} request ({text(req)} per GPU) is above its limit ({text(lim)}); give a limit of at "
                f"least {text(req)} with it")
    return None


def check_name(kind: names.NameKind, text: str, *, field: str) -> Problem | None:
    """A namespace, pod or pool name Kubernetes would refuse (:mod:`events.names`, RFC 1123), for
    intents from producers that did not check it (the Pod parser and the HTTP API do)."""
    message = names.problem(kind, text, field=field)
    return None if message is None else (field, text, message)


def check_spec(spec: AllocationSpec) -> Problem | None:
    """Everything RequestAllocation needs to be decidable (identity, Kubernetes names of namespace,
    pool and pod, count, QoS, isolation, amounts; a partition template only with isolation
    ``partitioned``)."""
    for name in ("allocation_id", "namespace", "pool"):
        if not getattr(spec, name):
            return f"spec.{name}", "", f"spec.{name} must not be empty"
    problem = (check_name("namespace", spec.namespace, field="spec.namespace")
               or check_name("pool", spec.pool, field="spec.pool")
               or (check_name("pod", spec.pod, field="spec.pod") if spec.pod else None))
    if problem:
        return problem
    if not 1 <= spec.gpu_count <= MAX_GPUS_PER_ALLOCATION:
        return "spec.gpu_count", str(spec.gpu_count), (
            f"gpu count {spec.gpu_count} out of range [1, {MAX_GPUS_PER_ALLOCATION}]")
    if spec.qos not in QOS_LEVELS:
        return "spec.qos", spec.qos, f"unknown QoS {spec.qos!r}; expected one of {', '.join(QOS_LEVELS)}"
    if spec.isolation not in ISOLATION_MODES:
        return "spec.isolation", spec.isolation, f"unknown isolation mode {spec.isolation!r}"
    if spec.partition_template and spec.isolation != "partitioned":
        return "spec.partition_template", spec.partition_template, (
            f"a partition template needs isolation partitioned, not {spec.isolation}")
    if spec.cpu_milli < 0 or spec.memory_bytes < 0:
        return "spec.cpu_milli", str(spec.cpu_milli), "pod CPU and memory requests must not be negative"
    if any(i < 0 for i in spec.gpu_indices):
        return "spec.gpu_indices", ",".join(map(str, spec.gpu_indices)), "GPU indices must not be negative"
    return check_request_limit(spec.request, spec.limit)


def _check_amount(amount: QuotaAmount | None, field: str) -> Problem | None:
    if amount is None:
        return None
    for name in ("milli_tflops", "vram_bytes"):
        value = getattr(amount, name)
        if value is not None and value < 0:
            return f"{field}.{name}", str(value), f"{field}.{name} cannot be negative"
    return None


def check_quota(spec: QuotaSpec) -> Problem | None:
    """TensorFusion quota validation: no negatives, limits ≥ requests when both set, threshold 0-100."""
    for field in ("total_requests", "total_limits", "max_requests", "max_limits"):
        problem = _check_amount(getattr(spec, field), f"spec.{field}")
        if problem:
            return problem
    for name in ("max_workers", "max_gpu_count"):
        value = getattr(spec, name)
        if value is not None and value < 0:
            return f"spec.{name}", str(value), f"spec.{name} cannot be negative"
    req, lim = spec.total_requests, spec.total_limits
    if req is not None and lim is not None:
        for name in ("milli_tflops", "vram_bytes"):
            r, li = getattr(req, name), getattr(lim, name)
            if r and li and li < r:
                return f"spec.total_limits.{name}", str(li), f"limits.{name} cannot be less than requests.{name}"
    if not 0 <= spec.alert_threshold_percent <= 100:
        value = spec.alert_threshold_percent
        reason = f"alertThresholdPercent must be between 0 and 100, got {value}"
        return "spec.alert_threshold_percent", str(value), reason
    return None


def check_pool(config: PoolConfig, strategies: frozenset[str]) -> Problem | None:
    """A registered strategy, finite non-negative weights, a non-negative worker limit, a known
    preemption scope (:data:`events.values.PREEMPTION_SCOPES`), isolation policy and topology
    setting (:func:`check_isolation_topology`)."""
    if config.placement not in strategies:
        known = ", ".join(sorted(strategies))
        return "config.placement", config.placement, f"unknown placement strategy {config.placement!r}; known: {known}"
    for name in ("vram_weight", "tflops_weight"):
        value = getattr(config, name)
        if not math.isfinite(value) or value < 0:
            return f"config.{name}", str(value), f"config.{name} must be a finite non-negative number"
    if config.max_workers_per_node < 0:
        value = str(config.max_workers_per_node)
        return "config.max_workers_per_node", value, "max workers per node cannot be negative"
    if config.preemption not in PREEMPTION_SCOPES:
        scopes = ", ".join(PREEMPTION_SCOPES)
        return "config.preemption", config.preemption, f"preemption must be one of {scopes}"
    for name in ("fair_share_half_life_s", "reclaim_min_runtime_s", "reclaim_max_per_minute"):
        value = getattr(config, name)
        if value < 0:
            return f"config.{name}", str(value), f"config.{name} cannot be negative, got {value}"
    return check_isolation_topology(config)


def check_isolation_topology(config: PoolConfig) -> Problem | None:
    """A known isolation policy (:data:`events.values.ISOLATION_POLICIES`), topology mode
    (:data:`events.values.TOPOLOGY_MODES`) and a max topology tier within 0-3."""
    if config.isolation_policy not in ISOLATION_POLICIES:
        known = ", ".join(ISOLATION_POLICIES)
        return "config.isolation_policy", config.isolation_policy, f"isolation policy must be one of {known}"
    if config.topology not in TOPOLOGY_MODES:
        return "config.topology", config.topology, f"topology must be one of {', '.join(TOPOLOGY_MODES)}"
    if not 0 <= config.max_topology_tier <= MAX_TOPOLOGY_TIER:
        value = str(config.max_topology_tier)
        return "config.max_topology_tier", value, f"max topology tier must be between 0 and {MAX_TOPOLOGY_TIER}"
    return None


def _share_amount(value: ShareAmount | None, field: str) -> Problem | None:
    if value is None:
        return None
    for resource in SHARE_RESOURCES:
        got = getattr(value, resource)
        if got is not None and got < 0:
            return f"{field}.{resource}", str(got), f"{field}.{resource} cannot be negative, got {got}"
    return None


def _at_most(small: ShareAmount, large: ShareAmount, field: str, what: str) -> Problem | None:
    """Every resource of ``small`` (unset: 0) within ``large``'s (unset: 0)."""
    for resource in SHARE_RESOURCES:
        got, bound = getattr(small, resource) or 0, getattr(large, resource) or 0
        if got > bound:
            return f"{field}.{resource}", str(got), f"{field}.{resource} {got} is above {what} ({bound})"
    return None


def _share_pool(held: SharePool, field: str) -> Problem | None:
    problem = (check_name("pool", held.pool, field=f"{field}.pool")
               or _share_amount(held.guaranteed, f"{field}.guaranteed")
               or _share_amount(held.borrowing_limit, f"{field}.borrowing_limit")
               or _share_amount(held.lending_limit, f"{field}.lending_limit"))
    if problem or held.lending_limit is None:
        return problem
    return _at_most(held.lending_limit, held.guaranteed, f"{field}.lending_limit",
                    "the guarantee it lends from (Kueue: lendingLimit <= nominalQuota)")


def check_share(shares: dict[str, ShareSpec], name: str, spec: ShareSpec) -> Problem | None:
    """SetShare against the shares there are (docs/allocation.md "Fair share"): a valid name; valid,
    distinct namespaces that are in no other share; a weight 1..1000; valid, distinct pools; limits
    and guarantees not negative, a lending limit within the guarantee; one level of nesting: a
    parent exists, is not the share itself, has no namespaces and no parent of its own, and a share
    that is some share's parent takes no namespaces and no parent; a child's guarantee per pool and
    resource within its parent's (checked from both sides). Returns the first problem or None."""
    problem = check_name("share", name, field="name")
    if problem:
        return problem
    seen: set[str] = set()
    owner = {ns: other for other, held in shares.items() if other != name for ns in held.namespaces}
    for ns in spec.namespaces:
        problem = check_name("namespace", ns, field="spec.namespaces")
        if problem:
            return problem
        if ns in seen:
            return "spec.namespaces", ns, f"namespace {ns} is listed twice"
        seen.add(ns)
        if ns in owner:
            return "spec.namespaces", ns, (f"namespace {ns} is already in share {owner[ns]} (a namespace is in at "
                                           f"most one share)")
    if not 1 <= spec.weight <= MAX_SHARE_WEIGHT:
        value = spec.weight
        return "spec.weight", str(value), f"spec.weight must be between 1 and {MAX_SHARE_WEIGHT}, got {value}"
    pools: set[str] = set()
    for i, held in enumerate(spec.pools):
        problem = _share_pool(held, f"spec.pools[{i}]")
        if problem:
            return problem
        if held.pool in pools:
            return f"spec.pools[{i}].pool", held.pool, f"pool {held.pool} is listed twice"
        pools.add(held.pool)
    return _check_nesting(shares, name, spec)


def _check_nesting(shares: dict[str, ShareSpec], name: str, spec: ShareSpec) -> Problem | None:
    kids = sorted(other for other, held in shares.items() if held.parent == name and other != name)
    if spec.parent:
        parent = shares.get(spec.parent)
        if spec.parent == name:
            return "spec.parent", spec.parent, f"share {name} cannot be its own parent"
        if parent is None:
            return "spec.parent", spec.parent, f"parent share {spec.parent} does not exist; create it first"
        if parent.namespaces:
            return "spec.parent", spec.parent, (f"share {spec.parent} has namespaces, so it cannot be a parent "
                                                f"(a parent groups shares only)")
        if parent.parent:
            return "spec.parent", spec.parent, (f"share {spec.parent} has a parent of its own ({parent.parent}); "
                                                f"shares nest one level only")
        if kids:
            return "spec.parent", spec.parent, (f"share {name} is the parent of {', '.join(kids)}, so it cannot "
                                                f"have a parent (shares nest one level only)")
        problem = _within_parent(spec, parent, spec.parent)
        if problem:
            return problem
    if kids and spec.namespaces:
        return "spec.namespaces", spec.namespaces[0], (f"share {name} is the parent of {', '.join(kids)}, so it "
                                                       f"cannot have namespaces")
    return _covers_children(spec, kids, shares) if kids else None


def _within_parent(child: ShareSpec, parent: ShareSpec, parent_name: str) -> Problem | None:
    """The new child's guarantee per pool and resource within its parent's (a pool the parent does
    not name guarantees 0)."""
    theirs = {held.pool: held.guaranteed for held in parent.pools}
    for i, held in enumerate(child.pools):
        problem = _at_most(held.guaranteed, theirs.get(held.pool, ShareAmount()), f"spec.pools[{i}].guaranteed",
                           f"parent {parent_name}'s guarantee in pool {held.pool}")
        if problem:
            return problem
    return None


def _covers_children(parent: ShareSpec, kids: list[str], shares: dict[str, ShareSpec]) -> Problem | None:
    """The new parent's guarantee per pool and resource at least each existing child's."""
    mine = {held.pool: (i, held.guaranteed) for i, held in enumerate(parent.pools)}
    for kid in kids:
        for held in shares[kid].pools:
            index, bound = mine.get(held.pool, (None, ShareAmount()))
            for resource in SHARE_RESOURCES:
                have, need = getattr(bound, resource) or 0, getattr(held.guaranteed, resource) or 0
                if need > have:
                    field = "spec.pools" if index is None else f"spec.pools[{index}].guaranteed.{resource}"
                    return field, str(have), (f"the guarantee of {resource} in pool {held.pool} ({have}) is below "
                                              f"child share {kid}'s ({need}); a child's guarantee is within its "
                                              f"parent's")
    return None


def check_remove_share(shares: dict[str, ShareSpec], name: str) -> Problem | None:
    """RemoveShare: the share exists and is no share's parent."""
    if name not in shares:
        known = ", ".join(sorted(shares)[:5]) or "none"
        return "name", name, f"share {name} does not exist (shares: {known})"
    kids = sorted(other for other, held in shares.items() if held.parent == name)
    if kids:
        return "name", name, f"share {name} is the parent of {', '.join(kids)}; remove or re-parent them first"
    return None
