"""Namespace quota arithmetic (TensorFusion internal/quota), pure.

Usage is Σ over granted allocations of request×count and limit×count, in exact milli-TFLOPS
(percent shares converted with each chosen GPU's capacity) and bytes, plus one worker each.
Checks run single caps first (per-GPU values; 0 or None = no cap; failing them can never be
fixed by waiting) then totals (``usage + add > bound`` fails; equality passes). TensorFusion's
holes are closed: exact milli arithmetic instead of rounding each operand up, percent requests
count against TFLOPS totals, and an omitted dimension is unbounded rather than 0. A refusal names
what is in use, what is asked and the bound, in TFLOPS / GiB / workers (TensorFusion's message
gives only the request and the bound, in raw quantities).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from events.quantity import share_text, tflops_text, vram_text
from events.values import QuotaAmount, QuotaSpec, Resources
from services.allocator.domain.model import QuotaUsage


class QuotaBlock(NamedTuple):
    """A failed check: the dimension (TensorFusion name), the message, and whether waiting can help."""

    dimension: str
    reason: str
    resolvable: bool


def _message(ns: str, dimension: str, requested: str, limit: str) -> str:
    """A per-workload cap: ``... requested 30 TFLOPS per GPU, above the cap of 20 TFLOPS``."""
    return f"quota exceeded in namespace {ns} for {dimension}: requested {requested}, above the cap of {limit}"


def _total_message(ns: str, dimension: str, *, used: int, add: int, bound: int, text: Callable[[int], str]) -> str:
    """A namespace total: ``... 10 TFLOPS in use + 10 TFLOPS requested = 20 TFLOPS, above the
    limit of 15 TFLOPS (133.3 % of it)``; ``text`` renders the unit (TFLOPS, GiB, workers)."""
    share = share_text(used + add, bound)
    return (f"quota exceeded in namespace {ns} for {dimension}: {text(used)} in use + {text(add)} requested = "
            f"{text(used + add)}, above the limit of {text(bound)}" + (f" ({share} of it)" if share else ""))


def _workers(count: int) -> str:
    return f"{count} worker{'s' if count != 1 else ''}"


def usage_of(*, request_tflops: int, request_vram: int, limit_tflops: int, limit_vram: int) -> QuotaUsage:
    """One allocation's contribution (totals over its GPUs) as a usage value with one worker."""
    return QuotaUsage(
        requests_milli_tflops=request_tflops, requests_vram_bytes=request_vram,
        limits_milli_tflops=limit_tflops, limits_vram_bytes=limit_vram, workers=1,
    )


def check_single(
    spec: QuotaSpec, ns: str, *, request: Resources, limit: Resources, count: int
) -> QuotaBlock | None:
    """Per-workload caps on per-GPU amounts (milli-TFLOPS already converted) and GPU count."""
    caps = (
        (spec.max_requests, request, "request"),
        (spec.max_limits, limit, "limit"),
    )
    for cap, amount, side in caps:
        if cap is None:
            continue
        if cap.milli_tflops and amount.milli_tflops > cap.milli_tflops:
            dim = f"single.max.tflops.{side}"
            text = _message(ns, dim, f"{tflops_text(amount.milli_tflops)} per GPU", tflops_text(cap.milli_tflops))
            return QuotaBlock(dim, text, False)
        if cap.vram_bytes and amount.vram_bytes > cap.vram_bytes:
            dim = f"single.max.vram.{side}"
            text = _message(ns, dim, f"{vram_text(amount.vram_bytes)} per GPU", vram_text(cap.vram_bytes))
            return QuotaBlock(dim, text, False)
    if spec.max_gpu_count and count > spec.max_gpu_count:
        return QuotaBlock("single.max.gpuCount.limit", _message(
            ns, "single.max.gpuCount.limit", f"{count} GPUs", f"{spec.max_gpu_count} GPUs"), False)
    return None


def _check_amount(
    bound: QuotaAmount | None, ns: str, side: str, *, used: tuple[int, int], add: tuple[int, int]
) -> QuotaBlock | None:
    if bound is None:
        return None
    if bound.milli_tflops is not None and used[0] + add[0] > bound.milli_tflops:
        dim = f"total.max.tflops.{side}"
        return QuotaBlock(dim, _total_message(ns, dim, used=used[0], add=add[0], bound=bound.milli_tflops,
                                              text=tflops_text), True)
    if bound.vram_bytes is not None and used[1] + add[1] > bound.vram_bytes:
        dim = f"total.max.vram.{side}"
        return QuotaBlock(dim, _total_message(ns, dim, used=used[1], add=add[1], bound=bound.vram_bytes,
                                              text=vram_text), True)
    return None


def check_totals(spec: QuotaSpec, ns: str, *, usage: QuotaUsage, add: QuotaUsage) -> QuotaBlock | None:
    """Namespace totals: requests, then limits, then workers (``usage + add`` must stay ≤ bound)."""
    block = _check_amount(
        spec.total_requests, ns, "request",
        used=(usage.requests_milli_tflops, usage.requests_vram_bytes),
        add=(add.requests_milli_tflops, add.requests_vram_bytes),
    ) or _check_amount(
        spec.total_limits, ns, "limit",
        used=(usage.limits_milli_tflops, usage.limits_vram_bytes),
        add=(add.limits_milli_tflops, add.limits_vram_bytes),
    )
    if block is not None:
        return block
    if spec.max_workers is not None and add.workers and usage.workers + add.workers > spec.max_workers:
        dim = "total.max.workers.limit"
        return QuotaBlock(dim, _total_message(ns, dim, used=usage.workers, add=add.workers, bound=spec.max_workers,
                                              text=_workers), True)
    return None


def subtract(usage: QuotaUsage, other: QuotaUsage) -> QuotaUsage:
    """``usage − other`` field by field (exact; never needs a floor since usage is derived)."""
    return QuotaUsage(
        requests_milli_tflops=usage.requests_milli_tflops - other.requests_milli_tflops,
        requests_vram_bytes=usage.requests_vram_bytes - other.requests_vram_bytes,
        limits_milli_tflops=usage.limits_milli_tflops - other.limits_milli_tflops,
        limits_vram_bytes=usage.limits_vram_bytes - other.limits_vram_bytes,
        workers=usage.workers - other.workers,
    )

