"""The autoscaler's read model of the allocation log: workers per workload and GPU headroom.

Folds the events of ``GPULEDGER_EVENTS`` it needs (nodes and GPUs, grants, resizes, releases)
into what the recommender asks for: a workload's live workers with their original and current
per-GPU request/limit, and the per-worker headroom of TensorFusion
``GetMaxAllowedResourcesSpec`` (``internal/autoscaler/workload/handler.go``). Available capacity is
derived from live charges, like the allocator does, so it cannot drift. Pure; no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

import msgspec

from events import decisions
from events.values import AllocationSpec, Resources
from services.autoscaler.recommendation import RequestLimit

WorkloadKey = tuple[str, str]
"""(namespace, workload); a pod without a workload name is its own workload."""


def workload_key(spec: AllocationSpec) -> WorkloadKey:
    """The workload an allocation belongs to: ``spec.workload``, else the pod name."""
    return spec.namespace, spec.workload or spec.pod


class Worker(msgspec.Struct, kw_only=True):
    """A granted allocation (one pod). ``original`` is the admitted request/limit (the spec),
    ``current`` the one in force after resizes; ``gpus[i]`` carries ``charges[i]``."""

    spec: AllocationSpec
    node: str
    gpus: tuple[str, ...]
    charges: tuple[Resources, ...]
    original: RequestLimit
    current: RequestLimit
    granted_at: datetime


class LedgerView:
    """GPUs (name -> capacity), live workers (allocation id -> Worker) and a GPU -> workers index."""

    def __init__(self) -> None:
        self.capacity: dict[str, Resources] = {}
        self.node_gpus: dict[str, tuple[str, ...]] = {}
        self.workers: dict[str, Worker] = {}
        self._on_gpu: dict[str, set[str]] = defaultdict(set)
        self._by_workload: dict[WorkloadKey, set[str]] = defaultdict(set)

    def apply(self, event: decisions.AnyEvent) -> None:
        """Fold one event; events the autoscaler does not need are ignored."""
        if isinstance(event, decisions.NodeRegistered):
            self._drop_node(event.node)
            self.node_gpus[event.node] = tuple(g.name for g in event.gpus)
            self.capacity.update({g.name: g.capacity for g in event.gpus})
        elif isinstance(event, decisions.NodeRemoved):
            self._drop_node(event.node)
        elif isinstance(event, decisions.GpuCapacityChanged):
            self.capacity[event.gpu] = event.capacity
        elif isinstance(event, decisions.AllocationGranted):
            self._grant(event)
        elif isinstance(event, decisions.AllocationResized):
            self._resize(event)
        elif isinstance(event, decisions.AllocationReleased | decisions.AllocationPreempted):
            self._release(event.allocation_id)

    def _drop_node(self, node: str) -> None:
        for gpu in self.node_gpus.pop(node, ()):
            self.capacity.pop(gpu, None)

    def _grant(self, event: decisions.AllocationGranted) -> None:
        spec = event.spec
        rl = self._resolve(spec, event.gpus[0] if event.gpus else "", event.charges)
        worker = Worker(spec=spec, node=event.node, gpus=event.gpus, charges=event.charges,
                        original=rl, current=rl, granted_at=event.at)
        self._release(spec.allocation_id)
        self.workers[spec.allocation_id] = worker
        for gpu in event.gpus:
            self._on_gpu[gpu].add(spec.allocation_id)
        self._by_workload[workload_key(spec)].add(spec.allocation_id)

    def _resolve(self, spec: AllocationSpec, gpu: str, charges: tuple[Resources, ...]) -> RequestLimit:
        """Request/limit in milli-TFLOPS: a compute percent converts with the first GPU's capacity."""
        cap = self.capacity.get(gpu, Resources()).milli_tflops

        def tflops(res: Resources, charged: int) -> Resources:
            if res.milli_tflops or not res.compute_milli_percent:
                return res
            value = charged or -(-cap * res.compute_milli_percent // 100_000)
            return Resources(milli_tflops=value, vram_bytes=res.vram_bytes)

        charged = charges[0].milli_tflops if charges else 0
        return RequestLimit(request=tflops(spec.request, charged), limit=tflops(spec.limit, 0))

    def _resize(self, event: decisions.AllocationResized) -> None:
        worker = self.workers.get(event.allocation_id)
        if worker is None:
            return
        worker.current = RequestLimit(request=event.request, limit=event.limit)
        if len(event.charges) == len(worker.gpus):
            worker.charges = event.charges

    def _release(self, allocation_id: str) -> None:
        worker = self.workers.pop(allocation_id, None)
        if worker is None:
            return
        for gpu in worker.gpus:
            self._on_gpu[gpu].discard(allocation_id)
        key = workload_key(worker.spec)
        self._by_workload[key].discard(allocation_id)
        if not self._by_workload[key]:
            del self._by_workload[key]

    def workloads(self) -> list[WorkloadKey]:
        """Every workload with at least one live worker, sorted."""
        return sorted(self._by_workload)

    def workload_workers(self, key: WorkloadKey) -> list[Worker]:
        """The workload's live workers, ordered by allocation id."""
        return [self.workers[a] for a in sorted(self._by_workload.get(key, ()))]

    def available(self, gpu: str) -> Resources:
        """Capacity minus the charges of live allocations on ``gpu`` (zero for an unknown GPU)."""
        cap = self.capacity.get(gpu, Resources())
        tflops, vram = cap.milli_tflops, cap.vram_bytes
        for allocation_id in self._on_gpu.get(gpu, ()):
            worker = self.workers[allocation_id]
            charge = worker.charges[worker.gpus.index(gpu)]
            tflops -= charge.milli_tflops
            vram -= charge.vram_bytes
        return Resources(milli_tflops=tflops, vram_bytes=vram)

    def max_allowed(self, key: WorkloadKey) -> Resources | None:
        """Per-worker headroom: min over the workload's GPUs of (available + own charges) // own workers.

        None when the workload has no workers (no cap), as TensorFusion does.
        """
        own: dict[str, list[Resources]] = defaultdict(list)
        for worker in self.workload_workers(key):
            for gpu, charge in zip(worker.gpus, worker.charges, strict=False):
                own[gpu].append(charge)
        if not own:
            return None
        best: Resources | None = None
        for gpu, charges in sorted(own.items()):
            avail = self.available(gpu)
            tflops = (avail.milli_tflops + sum(c.milli_tflops for c in charges)) // len(charges)
            vram = (avail.vram_bytes + sum(c.vram_bytes for c in charges)) // len(charges)
            best = Resources(milli_tflops=tflops, vram_bytes=vram) if best is None else Resources(
                milli_tflops=min(best.milli_tflops, tflops), vram_bytes=min(best.vram_bytes, vram))
        return best
