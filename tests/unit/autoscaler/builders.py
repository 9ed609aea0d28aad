"""Readable test data for the autoscaler tests: resources, estimates, samples, allocations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from events import decisions
from events.metrics import UsageSample
from events.values import AllocationSpec, GpuSpec, Resources
from services.autoscaler.aggregator import WorkloadAggregator
from services.autoscaler.recommendation import RequestLimit
from services.autoscaler.recommender import Estimates

GI = 1 << 30
T0 = datetime(2026, 3, 5, tzinfo=UTC)


def res(tflops: float, vram_gi: float) -> Resources:
    """``tflops`` TFLOPS and ``vram_gi`` GiB as exact integers."""
    return Resources(milli_tflops=round(tflops * 1000), vram_bytes=round(vram_gi * GI))


def rl(req: tuple[float, float], lim: tuple[float, float]) -> RequestLimit:
    """``rl((req TFLOPS, req GiB), (lim TFLOPS, lim GiB))``."""
    return RequestLimit(request=res(*req), limit=res(*lim))


def raw(req: tuple[int, int], lim: tuple[int, int]) -> RequestLimit:
    """Request/limit from raw (TFLOPS, bytes)."""
    return RequestLimit(request=Resources(milli_tflops=req[0] * 1000, vram_bytes=req[1]),
                        limit=Resources(milli_tflops=lim[0] * 1000, vram_bytes=lim[1]))


def estimates(lower: float, target: float, upper: float) -> Estimates:
    """Same number for TFLOPS and GiB, as in the percentile cases A4-A9."""
    return Estimates(lower=res(lower, lower), target=res(target, target), upper=res(upper, upper))


def fed(series: list[tuple[str, float, float, int]], *, tensorfusion: bool = False) -> WorkloadAggregator:
    """An aggregator fed (worker, TFLOPS, VRAM bytes, seconds after T0) samples."""
    agg = WorkloadAggregator(tensorfusion_vram_timing=tensorfusion)
    for worker, tflops, vram, seconds in series:
        agg.add_sample(worker, milli_tflops=round(tflops * 1000), vram_bytes=int(vram),
                       at=T0 + timedelta(seconds=seconds))
    return agg


def sample(*, workload: str = "llama", namespace: str = "ml", pod: str = "llama-0", allocation_id: str = "a-0",
           tflops: float = 10, vram: int = GI, at: datetime = T0) -> UsageSample:
    """One usage sample."""
    return UsageSample(workload=workload, namespace=namespace, pod=pod, allocation_id=allocation_id,
                       milli_tflops_used=round(tflops * 1000), vram_bytes_used=vram, at=at)


def gpu(name: str = "gpu-0", *, tflops: float = 2000, vram_gi: float = 2000) -> GpuSpec:
    """A Running GPU."""
    return GpuSpec(name=name, capacity=res(tflops, vram_gi))


def spec(allocation_id: str = "a-0", *, workload: str = "llama", pod: str = "", request: Resources | None = None,
         limit: Resources | None = None, qos: str = "medium", attributes: dict[str, str] | None = None,
         namespace: str = "ml", pool: str = "default") -> AllocationSpec:
    """An AllocationSpec (10/8Gi ; 20/16Gi by default, as the Go autoscaler tests)."""
    return AllocationSpec(allocation_id=allocation_id, namespace=namespace, pod=pod or f"pod-{allocation_id}",
                          pool=pool, workload=workload, request=request or res(10, 8), limit=limit or res(20, 16),
                          qos=qos, attributes=attributes or {})


def granted(s: AllocationSpec, *, gpus: tuple[str, ...] = ("gpu-0",), at: datetime = T0,
            node: str = "node-0") -> decisions.AllocationGranted:
    """The AllocationGranted event of ``s`` charging its request on each GPU."""
    return decisions.AllocationGranted(at=at, spec=s, node=node, gpus=gpus, charges=tuple(s.request for _ in gpus))


def node(*gpus: GpuSpec, name: str = "node-0", pool: str = "default", at: datetime = T0) -> decisions.NodeRegistered:
    """A NodeRegistered event."""
    return decisions.NodeRegistered(at=at, node=name, pool=pool, gpus=gpus)
