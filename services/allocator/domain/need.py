"""Need: a request prepared once for the filters and strategies (sets, per-GPU amounts, flags).

Built from an :class:`AllocationSpec` at the start of a decision so the per-GPU checks in the hot
loop are attribute reads and set lookups.
"""

from __future__ import annotations

import operator

import msgspec

from events.values import AllocationSpec, NodeAffinity
from services.allocator.domain.units import tflops_on


class Need:
    """Per-GPU request of ``spec`` (milli-TFLOPS or milli-percent, bytes), count and constraints.

    Holds only what :func:`shape_key` covers, so one Need serves every request of that shape
    (it has no allocation id, namespace or limit on purpose).
    """

    __slots__ = (
        "affinity", "count", "cpu_milli", "indices", "isolation", "memory_bytes", "models", "partition_memo",
        "partitioned", "percent", "pool", "request", "shared", "template", "tflops", "vendor", "vram",
    )

    def __init__(self, spec: AllocationSpec) -> None:
        self.pool = spec.pool
        self.request = spec.request
        self.count = spec.gpu_count
        self.tflops = spec.request.milli_tflops
        self.percent = spec.request.compute_milli_percent
        self.vram = spec.request.vram_bytes
        self.isolation = spec.isolation
        self.shared = spec.isolation == "shared"
        self.models: frozenset[str] | None = frozenset(spec.gpu_models) if spec.gpu_models else None
        self.vendor = spec.vendor
        self.indices: frozenset[int] | None = frozenset(spec.gpu_indices) if spec.gpu_indices else None
        self.affinity: NodeAffinity | None = spec.node_affinity
        self.cpu_milli = spec.cpu_milli
        self.memory_bytes = spec.memory_bytes
        self.partitioned = spec.isolation == "partitioned"
        self.template = spec.partition_template
        self.partition_memo: dict[object, object] = {}
        """The partition template chosen per GPU family and capacity (domain/partition.py ``chosen``)."""

    def tflops_on(self, capacity_milli_tflops: int) -> int:
        """Milli-TFLOPS this request takes on a GPU of the given capacity (percent converted, rounded up)."""
        return tflops_on(self.request, capacity_milli_tflops)


ShapeKey = tuple[object, ...]

SHAPE_FIELDS: tuple[str, ...] = (
    "pool", "request", "gpu_count", "isolation", "gpu_models", "vendor", "gpu_indices", "node_affinity", "cpu_milli",
    "memory_bytes", "partition_template",
)
"""The AllocationSpec fields that decide where a request can go. :class:`Need` reads only these
(a test holds it to that), and filters and strategies see a request only through its Need."""

_shape = operator.attrgetter(*SHAPE_FIELDS)

NODE_ONLY_FIELDS: tuple[str, ...] = ("memory_bytes", "node_affinity")
"""Shape fields only node-level filters read: GPU filters and scan strategies' ranks never do (a
test holds them to that), so scan ranks are shared by requests differing only in these."""


GPU_BLIND_FIELDS: tuple[str, ...] = (*NODE_ONLY_FIELDS, "cpu_milli")
"""Shape fields no GPU filter reads (a test holds them to that): a node's GPU candidates are the
same for requests differing only in these (the rank cache shares them across such shapes)."""

_gpu_shape = operator.attrgetter(*(f for f in SHAPE_FIELDS if f not in GPU_BLIND_FIELDS))


def gpu_shape_key(spec: AllocationSpec) -> ShapeKey:
    """The part of :func:`shape_key` the GPU filters read (all but :data:`GPU_BLIND_FIELDS`)."""
    return _gpu_shape(spec)  # type: ignore[no-any-return]


def without_node_only(spec: AllocationSpec) -> AllocationSpec:
    """``spec`` with the :data:`NODE_ONLY_FIELDS` cleared (the shape a scan rank depends on)."""
    if not spec.memory_bytes and spec.node_affinity is None:
        return spec
    return msgspec.structs.replace(spec, memory_bytes=0, node_affinity=None)


def shape_key(spec: AllocationSpec) -> ShapeKey:
    """Everything about ``spec`` that decides where it can go (not who asks, nor its limit or QoS):
    two requests with the same key fit exactly the same GPUs."""
    return _shape(spec)  # type: ignore[no-any-return]
