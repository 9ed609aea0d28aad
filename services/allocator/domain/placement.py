"""Placement arithmetic: what granting a request on chosen GPUs charges (GPU amounts, quota usage)
and the quota checks that need the chosen GPUs. Pure functions of records; choosing the node
and GPUs is the Scheduler's (services.allocator.domain.scheduler).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, NamedTuple

from events.values import AllocationSpec, Partition, QuotaSpec, Resources
from services.allocator.domain.model import GpuState, QuotaUsage
from services.allocator.domain.quota import QuotaBlock, check_single, check_totals, usage_of
from services.allocator.domain.units import tflops_on


class Grant(NamedTuple):
    """A placement that passed every check: node, GPUs (in pick order), per-GPU charges, quota
    usage, per-GPU partitions (isolation ``partitioned`` only), and in a pool with shares the leaf
    share charged and whether the grant is borrowed (domain/borrowing.py)."""

    node: str
    gpus: tuple[str, ...]
    charges: tuple[Resources, ...]
    usage: QuotaUsage
    partitions: tuple[Partition, ...] = ()
    share: str = ""
    borrowed: bool = False


BlockCode = Literal["capacity", "quota", "share"]
"""Why a request does not fit now (AllocationQueued.code, besides a gang's ``gang``): no node has
room, its namespace quota, or its share's borrowing (a borrowing limit, or capacity other shares
keep for themselves; docs/allocation.md "Fair share")."""


class Blocked(NamedTuple):
    """Why a request does not fit now: ``code`` is one of :data:`BlockCode`."""

    code: BlockCode
    reason: str
    quota: QuotaBlock | None = None


def charge_on(gpu: GpuState, spec: AllocationSpec) -> Resources:
    """What ``spec`` takes from ``gpu``: the whole GPU for ``shared``, else the converted request."""
    cap = gpu.spec.capacity
    if spec.isolation == "shared":
        return Resources(milli_tflops=cap.milli_tflops, vram_bytes=cap.vram_bytes)
    return Resources(milli_tflops=tflops_on(spec.request, cap.milli_tflops), vram_bytes=spec.request.vram_bytes)


def usage_on(gpus: Iterable[GpuState], spec: AllocationSpec) -> QuotaUsage:
    """Quota usage of ``spec`` on these GPUs: Σ converted request and limit, one worker."""
    caps = [g.spec.capacity.milli_tflops for g in gpus]
    return usage_of(
        request_tflops=sum(tflops_on(spec.request, c) for c in caps),
        request_vram=spec.request.vram_bytes * len(caps),
        limit_tflops=sum(tflops_on(spec.limit, c) for c in caps),
        limit_vram=spec.limit.vram_bytes * len(caps),
    )


def lower_bound_usage(spec: AllocationSpec) -> QuotaUsage:
    """Usage known before placement (percent shares count 0 TFLOPS until GPUs are chosen)."""
    n = spec.gpu_count
    return usage_of(
        request_tflops=spec.request.milli_tflops * n, request_vram=spec.request.vram_bytes * n,
        limit_tflops=spec.limit.milli_tflops * n, limit_vram=spec.limit.vram_bytes * n,
    )


def single_caps_on(quota: QuotaSpec, spec: AllocationSpec, gpus: Iterable[GpuState]) -> QuotaBlock | None:
    """Per-workload quota caps against what ``spec`` asks of each of these GPUs (percent converted)."""
    for gpu in gpus:
        cap = gpu.spec.capacity.milli_tflops
        block = check_single(
            quota, spec.namespace, count=spec.gpu_count,
            request=Resources(milli_tflops=tflops_on(spec.request, cap), vram_bytes=spec.request.vram_bytes),
            limit=Resources(milli_tflops=tflops_on(spec.limit, cap), vram_bytes=spec.limit.vram_bytes),
        )
        if block is not None:
            return block
    return None


def exact_quota(
    quota: QuotaSpec, spec: AllocationSpec, gpus: list[GpuState], usage: QuotaUsage, add: QuotaUsage
) -> QuotaBlock | None:
    """The quota check once the GPUs are chosen: per-workload caps for percent requests, then totals."""
    if spec.request.compute_milli_percent or spec.limit.compute_milli_percent:
        block = single_caps_on(quota, spec, gpus)
        if block is not None:
            return block
    return check_totals(quota, spec.namespace, usage=usage, add=add)
