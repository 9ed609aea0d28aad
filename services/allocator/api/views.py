"""JSON views of the projection and of outcome events: the shapes the CLI prints with ``--json``.

Pure functions shared by the allocator's HTTP API and the CLI (``status``, ``submit``,
``simulate``). Quantities are canonical Kubernetes strings (``"10"``, ``"500m"``, ``"4Gi"``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from events import codec, decisions
from events.quantity import format_bytes, format_milli, format_percent_milli
from events.values import AllocationSpec, Partition, Resources, priority_of
from services.allocator.domain.filters.isolation_policy import lock_of
from services.allocator.domain.model import AllocationState, GpuState
from services.allocator.domain.preemption import NoPlan
from services.allocator.domain.victim_choice import Plan

OUTCOME_TYPES = ("allocation_granted", "allocation_queued", "allocation_rejected", "intent_rejected")
"""Event tags that end a RequestAllocation (what ``submit`` waits for)."""


def resources_view(value: Resources) -> dict[str, str]:
    """``{"tflops", "vram"}`` (plus ``"compute_percent"`` when the request is a share)."""
    view = {"tflops": format_milli(value.milli_tflops), "vram": format_bytes(value.vram_bytes)}
    if value.compute_milli_percent:
        view["compute_percent"] = format_percent_milli(value.compute_milli_percent)
    return view


def spec_view(spec: AllocationSpec) -> dict[str, Any]:
    """The composed request: allocation_id, namespace, pod, pool, gpu_count, qos, request, limit, ..."""
    return {
        "allocation_id": spec.allocation_id,
        "namespace": spec.namespace,
        "pod": spec.pod,
        "pool": spec.pool,
        "workload": spec.workload,
        "gpu_count": spec.gpu_count,
        "qos": spec.qos,
        "isolation": spec.isolation,
        "gpu_models": list(spec.gpu_models),
        "request": resources_view(spec.request),
        "limit": resources_view(spec.limit),
    }


def outcome_view(event: decisions.AnyEvent, *, position: int | None) -> dict[str, Any]:
    """The ``submit --json`` shape of an outcome event (``position`` None: not written, simulate); a
    grant in a pool with shares adds ``share`` and ``borrowed`` (docs/shares.md)."""
    view: dict[str, Any] = {"type": codec.tag_of(event), "allocation_id": "", "namespace": "", "pod": "",
                            "pool": "", "node": "", "gpus": [], "gpu_count": 0, "qos": "",
                            "request": resources_view(Resources()), "limit": resources_view(Resources()),
                            "reason": "", "position": position}
    spec = getattr(event, "spec", None)
    if isinstance(spec, AllocationSpec):
        view.update({key: value for key, value in spec_view(spec).items() if key in view})
    if isinstance(event, decisions.AllocationGranted):
        view.update(node=event.node, gpus=list(event.gpus))
        if event.preempted:
            view["preempted"] = list(event.preempted)
        if event.share:  # a pool with shares: the share charged, and whether the grant borrowed
            view.update(share=event.share, borrowed=event.borrowed)
    elif isinstance(event, decisions.AllocationQueued | decisions.AllocationRejected):
        view["reason"] = event.reason
    elif isinstance(event, decisions.IntentRejected):
        view.update(reason=event.reason, field=event.field)
    return view


def gpu_view(gpu: GpuState, allocations: Mapping[str, AllocationState] | None = None) -> dict[str, Any]:
    """One GPU: name, node, pool, model, phase, capacity, available, allocations (ids), topology
    (``numa_node``, ``interconnect_group``), isolation (``isolation_mode``, ``isolation_capabilities``)
    and, given the live ``allocations``, ``isolation_lock``: "" idle, the one mode its allocations
    hold, or "conflict" (what a dynamic pool's filters see; docs/allocation.md)."""
    view = {
        "name": gpu.name,
        "node": gpu.node,
        "pool": gpu.pool,
        "model": gpu.spec.model,
        "phase": gpu.phase,
        "capacity": resources_view(gpu.capacity),
        "available": resources_view(gpu.available),
        "allocations": sorted(gpu.charges),
        **({"partitions": {aid: partition_view(p) for aid, p in sorted(gpu.partitions.items())}}
           if gpu.partitions else {}),
        "numa_node": gpu.spec.numa_node,
        "interconnect_group": gpu.spec.interconnect_group,
        "isolation_mode": gpu.spec.isolation_mode,
        "isolation_capabilities": list(gpu.spec.isolation_capabilities),
    }
    if allocations is not None:
        view["isolation_lock"] = lock_of(gpu, allocations)
    return view


def partition_view(partition: Partition) -> dict[str, Any]:
    """One MIG partition: template, NVML profile id, start and end slot (end exclusive)."""
    return {"template": partition.template, "profile_id": partition.profile_id, "start": partition.start,
            "end": partition.end}


def is_outcome_of(event: decisions.AnyEvent, allocation_id: str) -> bool:
    """True for the granted/queued/rejected event of ``allocation_id`` (not a later queue grant)."""
    if isinstance(event, decisions.AllocationGranted | decisions.AllocationQueued
                  | decisions.AllocationRejected):
        return event.spec.allocation_id == allocation_id
    return False


def preemption_view(found: Plan | NoPlan) -> dict[str, Any]:
    """A priority preemption plan: ``{"possible": true, "kind": "priority", "node", "gpus", "victims":
    [{"allocation_id", "namespace", "pod", "priority", "gpus", "reclaim": false}]}``, or why there is
    none: ``{"possible": false, "code", "reason", "protected", "out_of_scope"}`` (codes: off, never,
    priority, candidates, fit)."""
    if isinstance(found, NoPlan):
        return {"possible": False, "code": found.code, "reason": found.reason, "protected": found.protected,
                "out_of_scope": found.out_of_scope}
    return {"possible": True, "kind": "priority", "node": found.node, "gpus": list(found.gpus),
            "victims": [{"allocation_id": v.spec.allocation_id, "namespace": v.spec.namespace, "pod": v.spec.pod,
                         "priority": priority_of(v.spec), "gpus": list(v.gpus), "reclaim": False}
                        for v in found.victims]}


def taken_view(granted: decisions.AllocationGranted, taken: Sequence[decisions.AllocationPreempted]) -> dict[str, Any]:
    """What a decision that grants by taking allocations took, from its events: the shape of
    :func:`preemption_view`'s plan, ``kind`` ``reclaim`` when the victims were reclaimed for a
    share below its guarantee (docs/fairness.md) and ``priority`` otherwise, each victim with the
    event's ``reason``. This, not the priority search alone, is what ``decide`` does in a pool with
    shares, so ``simulate`` and ``why`` show it whenever the decision takes victims."""
    return {"possible": True, "kind": "reclaim" if any(t.reclaim for t in taken) else "priority",
            "node": granted.node, "gpus": list(granted.gpus),
            "victims": [{"allocation_id": t.allocation_id, "namespace": t.namespace, "pod": t.pod,
                         "priority": t.priority, "gpus": list(t.gpus), "reclaim": t.reclaim, "reason": t.reason}
                        for t in taken]}
