"""AllocationBook: the binder's fold of GPULEDGER_EVENTS (pure, no I/O).

Tracks live allocations (granted, with node and GPUs; or queued) by allocation id, and feeds the
webhook's ClusterView with GPU model capacities and pool names from NodeRegistered. The binder
replays the stream from its start into a fresh book, so no state is stored anywhere else.
"""

from __future__ import annotations

import msgspec

from events import decisions
from events.values import AllocationSpec, Enforcement, GpuSpec, Partition
from services.admission.grant_annotations import bind_annotations
from services.admission.partition_annotations import partition_annotations
from services.admission.view import ClusterView
from services.podspec.device_plan import DevicePlan, device_plan, enforcement_of


class Grant(msgspec.Struct, frozen=True, kw_only=True):
    """A granted allocation the pod must be pinned to: node and GPU names, plus the annotations the
    bind writes besides ``gpu-ids`` (:mod:`services.admission.grant_annotations`) and the problems
    that left one of those out (logged at bind)."""

    allocation_id: str
    namespace: str
    pod: str
    node: str
    gpus: tuple[str, ...]
    annotations: dict[str, str] = {}
    problems: tuple[str, ...] = ()
    device: DevicePlan | None = None
    """What the grant becomes on the pod (its annotations are part of ``annotations``)."""
    spec: AllocationSpec | None = None
    partitions: tuple[Partition, ...] = ()


class AllocationBook:
    """Live allocations by id: ``granted`` (bind targets), ``queued`` (namespace, pod), ``rejected``."""

    def __init__(self) -> None:
        self.granted: dict[str, Grant] = {}
        self.queued: dict[str, tuple[str, str]] = {}
        self.rejected: dict[str, str] = {}
        """allocation id -> reason, for pods that stay gated because their request can never fit."""
        self.gpu_capacity: dict[str, int] = {}
        """GPU name -> milli-TFLOPS, from the latest NodeRegistered (for the hard SM percent)."""
        self.gpus: dict[str, GpuSpec] = {}
        """GPU name -> discovery's record (UUID, index, capacity), from the latest NodeRegistered."""
        self.enforcement: dict[str, Enforcement] = {}
        """Pool -> its enforcement mode, from PoolConfigured."""

    def apply(self, event: decisions.AnyEvent, *, view: ClusterView | None = None) -> Grant | None:
        """Fold one event; returns the Grant when ``event`` is an AllocationGranted (to bind now) or
        an AllocationResized of a granted allocation (its annotations to rewrite)."""
        match event:
            case decisions.AllocationGranted(spec=spec, node=node, gpus=gpus, partitions=partitions):
                self.queued.pop(spec.allocation_id, None)
                grant = self._grant(spec, node, gpus, partitions)
                self.granted[spec.allocation_id] = grant
                return grant
            case decisions.AllocationResized(allocation_id=allocation_id, request=request, limit=limit):
                held = self.granted.get(allocation_id)
                if held is None or held.spec is None:
                    return None
                resized = msgspec.structs.replace(held.spec, request=request, limit=limit)
                grant = self._grant(resized, held.node, held.gpus, held.partitions)
                self.granted[allocation_id] = grant
                return grant
            case decisions.AllocationQueued(spec=spec):
                self.queued[spec.allocation_id] = (spec.namespace, spec.pod)
            case decisions.AllocationReleased(allocation_id=allocation_id):
                self._forget(allocation_id)
            case decisions.AllocationPreempted(allocation_id=allocation_id):
                self._forget(allocation_id)
            case decisions.AllocationRejected(spec=spec, reason=reason):
                self._forget(spec.allocation_id)
                self.rejected[spec.allocation_id] = reason
            case decisions.GangTimedOut(waiting=waiting, reason=reason):
                for allocation_id in waiting:  # their pods stay gated, annotated like a rejection
                    self._forget(allocation_id)
                    self.rejected[allocation_id] = reason
            case decisions.NodeRegistered(node=node, pool=pool, gpus=gpus):
                for gpu in gpus:
                    self.gpu_capacity[gpu.name] = gpu.capacity.milli_tflops
                    self.gpus[gpu.name] = gpu
                if view is not None:
                    view.place_node(node, pool)
                    for gpu in gpus:
                        if gpu.model:
                            view.model_capacity[gpu.model] = gpu.capacity
            case decisions.NodeRemoved(node=node):
                if view is not None:
                    view.place_node(node, None)
            case decisions.PoolConfigured(pool=pool, config=config):
                self.enforcement[pool] = config.enforcement
                if view is not None:
                    view.enforcement[pool] = config.enforcement
                    view.configured.add(pool)
            case decisions.PoolRemoved(pool=pool):  # its configuration is gone: the defaults again
                self.enforcement.pop(pool, None)
                if view is not None:
                    view.enforcement.pop(pool, None)
                    view.configured.discard(pool)
        return None

    def _grant(self, spec: AllocationSpec, node: str, gpus: tuple[str, ...],
               partitions: tuple[Partition, ...]) -> Grant:
        """The Grant of ``spec`` on ``node``'s ``gpus``: its bind annotations and device plan."""
        annotations, problems = bind_annotations(spec, gpus, self.gpu_capacity)
        annotations.update(partition_annotations(gpus, partitions))
        plan = device_plan(spec, enforcement=enforcement_of(spec, self.enforcement.get(spec.pool, "none")),
                           gpus=gpus, partitions=partitions, records=self.gpus)
        annotations.update(plan.annotations)
        return Grant(allocation_id=spec.allocation_id, namespace=spec.namespace, pod=spec.pod, node=node, gpus=gpus,
                     annotations=annotations, problems=(*problems, *plan.problems), device=plan, spec=spec,
                     partitions=partitions)

    def _forget(self, allocation_id: str) -> None:
        self.granted.pop(allocation_id, None)
        self.queued.pop(allocation_id, None)

    def live(self) -> dict[str, str]:
        """Every live allocation id -> its namespace (granted or queued)."""
        out = {allocation_id: grant.namespace for allocation_id, grant in self.granted.items()}
        out.update({allocation_id: ns for allocation_id, (ns, _) in self.queued.items()})
        return out
