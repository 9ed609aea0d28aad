"""Deciding ResizeAllocation with TensorFusion AdjustAllocation semantics.

Only a granted allocation can be resized. Each of its GPUs must have room for the new per-GPU
request (its own charge counts as free), single quota caps apply to the absolute new values and
totals to ``usage − old + new`` (no extra worker). A rejection says the largest per-GPU request
that would have fit (``max_request``: the tighter of GPU room and quota room), which the
autoscaler uses for its capped retry.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from events import decisions as ev
from events.intents import ResizeAllocation
from events.quantity import tflops_text, vram_text
from events.values import AllocationSpec, QuotaSpec, Resources
from services.allocator.domain.model import AllocationState, GpuState, QuotaUsage
from services.allocator.domain.placement import charge_on, single_caps_on, usage_on
from services.allocator.domain.quota import check_totals, subtract
from services.allocator.domain.state import ClusterState
from services.allocator.domain.units import tflops_on
from services.allocator.domain.validation import check_request_limit

_NO_BOUND = 1 << 62


def _rejected(intent: ResizeAllocation, allocation: AllocationState | None, now: datetime, *, code: str,
              reason: str, max_request: Resources = Resources(), dimension: str = "") -> ev.ResizeRejected:
    spec = allocation.spec if allocation else None
    return ev.ResizeRejected(
        at=now, allocation_id=intent.allocation_id, namespace=spec.namespace if spec else "",
        pool=spec.pool if spec else intent.pool, request=intent.request, limit=intent.limit, reason=reason,
        code=code, max_request=max_request, quota_dimension=dimension,
    )


def _gpu_room(gpu: GpuState, old: Resources) -> tuple[int, int]:
    cap = gpu.spec.capacity
    return (cap.milli_tflops - gpu.used_milli_tflops + old.milli_tflops,
            cap.vram_bytes - gpu.used_vram_bytes + old.vram_bytes)


def _quota_room(quota: QuotaSpec | None, others: QuotaUsage, count: int) -> tuple[int, int]:
    bound = quota.total_requests if quota else None
    if bound is None:
        return _NO_BOUND, _NO_BOUND
    t = _NO_BOUND if bound.milli_tflops is None else (bound.milli_tflops - others.requests_milli_tflops) // count
    v = _NO_BOUND if bound.vram_bytes is None else (bound.vram_bytes - others.requests_vram_bytes) // count
    return t, v


def decide_resize(state: ClusterState, intent: ResizeAllocation, now: datetime) -> list[ev.AnyEvent]:
    """ResizeAllocation -> AllocationResized | ResizeRejected."""
    allocation = state.allocations.get(intent.allocation_id)
    if allocation is None or allocation.status != "granted":
        return [_rejected(intent, allocation, now, code="not_granted",
                          reason=f"pod {intent.allocation_id} has not allocated GPUs")]
    if allocation.spec.isolation == "partitioned":
        return [_rejected(intent, allocation, now, code="invalid",
                          reason="a partitioned allocation has its template's fixed size; release it and request "
                                 "again to change it")]
    problem = check_request_limit(intent.request, intent.limit)
    if problem:
        return [_rejected(intent, allocation, now, code="invalid", reason=problem[2])]
    spec = msgspec.structs.replace(allocation.spec, request=intent.request, limit=intent.limit)
    gpus = [state.gpus[name] for name in allocation.gpus]
    others = subtract(state.usage.get(spec.namespace) or QuotaUsage(), allocation.usage or QuotaUsage())
    quota = state.quotas.get(spec.namespace)
    rooms = [_gpu_room(g, old) for g, old in zip(gpus, allocation.charges, strict=True)]
    quota_t, quota_v = _quota_room(quota, others, len(gpus))
    max_request = Resources(milli_tflops=max(0, min([quota_t, *(r[0] for r in rooms)])),
                            vram_bytes=max(0, min([quota_v, *(r[1] for r in rooms)])))
    charges = tuple(charge_on(g, spec) for g in gpus)
    for gpu, room, charge in zip(gpus, rooms, charges, strict=True):
        need_t = tflops_on(spec.request, gpu.spec.capacity.milli_tflops)
        if spec.isolation == "shared" and need_t <= gpu.spec.capacity.milli_tflops:
            continue
        if charge.milli_tflops > room[0] or charge.vram_bytes > room[1]:
            return [_rejected(intent, allocation, now, code="capacity", max_request=max_request,
                              reason=f"the new size does not fit on GPU {gpu.spec.name}: it has room for "
                                     f"{tflops_text(room[0])} and {vram_text(room[1])} of VRAM; "
                                     f"{tflops_text(charge.milli_tflops)} and {vram_text(charge.vram_bytes)} "
                                     "asked")]
    if quota is not None:
        block = _quota_block(quota, spec, gpus, others)
        if block is not None:
            return [_rejected(intent, allocation, now, code="quota", reason=block[1], dimension=block[0],
                              max_request=max_request)]
    return [ev.AllocationResized(at=now, allocation_id=spec.allocation_id, namespace=spec.namespace,
                                 pool=spec.pool, request=spec.request, limit=spec.limit, charges=charges)]


def _quota_block(
    quota: QuotaSpec, spec: AllocationSpec, gpus: list[GpuState], others: QuotaUsage
) -> tuple[str, str] | None:
    single = single_caps_on(quota, spec, gpus)
    if single is not None:
        return single.dimension, single.reason
    new = usage_on(gpus, spec)
    total = check_totals(quota, spec.namespace, usage=others, add=msgspec.structs.replace(new, workers=0))
    return (total.dimension, total.reason) if total else None
