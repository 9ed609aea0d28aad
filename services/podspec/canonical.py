"""The canonical-annotation writer: AllocationSpec -> the tensor-fusion.ai annotations and labels.

Quantities use Kubernetes canonical strings (events.quantity: ``1024Mi`` -> ``1Gi``, ``0.5`` ->
``500m``, ``1000`` -> ``1k``), so a scheduler reading the pod back (TensorFusion
``ComposeAllocationRequest``) sees exactly what gpuledger decided. Resource keys are written
only when non-zero; unlike TensorFusion (``internal/webhook/v1/tf_parser.go``) a stale user key
whose final value is zero is removed, so a pod never carries both a TFLOPS and a percent value on one side.
"""

from __future__ import annotations

from collections.abc import Mapping

from events import quantity
from events.values import AllocationSpec
from services.podspec import keys


def _resource_values(spec: AllocationSpec) -> dict[str, int]:
    return {
        keys.TFLOPS_REQUEST: spec.request.milli_tflops,
        keys.TFLOPS_LIMIT: spec.limit.milli_tflops,
        keys.VRAM_REQUEST: spec.request.vram_bytes,
        keys.VRAM_LIMIT: spec.limit.vram_bytes,
        keys.PERCENT_REQUEST: spec.request.compute_milli_percent,
        keys.PERCENT_LIMIT: spec.limit.compute_milli_percent,
    }


def canonical_annotations(spec: AllocationSpec) -> dict[str, str]:
    """Every annotation gpuledger writes for ``spec`` (TensorFusion's key names), values canonical."""
    written: dict[str, str] = {}
    for name, value in _resource_values(spec).items():
        if value:
            written[name] = quantity.format_bytes(value) if "vram" in name else quantity.format_milli(value)
    written[keys.QOS] = spec.qos
    written[keys.GPU_COUNT] = str(spec.gpu_count)
    written[keys.POOL] = spec.pool
    written[keys.ISOLATION] = spec.isolation
    if spec.gpu_models:
        written[keys.GPU_MODEL] = ",".join(spec.gpu_models)
    if spec.vendor:
        written[keys.VENDOR] = spec.vendor
    if spec.partition_template:
        written[keys.PARTITION_ID] = spec.partition_template
    if spec.gpu_indices:
        written[keys.GPU_INDICES] = ",".join(str(i) for i in spec.gpu_indices)
    written.update({k: v for k, v in spec.attributes.items() if k != keys.WORKLOAD})
    return written


def canonical_labels(spec: AllocationSpec) -> dict[str, str]:
    """Labels gpuledger writes: pool, workload (TensorFusion names) and the allocation id."""
    labels = {keys.POOL: spec.pool, keys.ALLOCATION_ID_LABEL: spec.allocation_id}
    workload = spec.attributes.get(keys.WORKLOAD, spec.workload)
    if workload and len(workload) <= 63:
        labels[keys.WORKLOAD] = workload
    return labels


def annotation_changes(spec: AllocationSpec, *, existing: Mapping[str, str]) -> dict[str, str | None]:
    """Annotation edits that make ``existing`` canonical: key -> new value, or None to remove it.

    Unchanged keys are left out (no patch op), as in TensorFusion's JSON diff. A resource key
    whose final value is zero is removed unless it already says zero (an explicit "0" stays, so
    re-reading the pod gives the same request).
    """
    wanted = canonical_annotations(spec)
    changes: dict[str, str | None] = {k: v for k, v in wanted.items() if existing.get(k) != v}
    for name in keys.RESOURCE_KEYS:
        if name in existing and name not in wanted and not _is_zero(existing[name]):
            changes[name] = None
    return changes


def _is_zero(text: str) -> bool:
    try:
        return quantity.parse(text) == 0
    except quantity.QuantityError:
        return False
