"""RFC 6902 JSONPatch for an admitted Pod: canonical annotations and labels, the scheduling gate,
native GPU resources removed from containers.

Like TensorFusion's JSON diff, an unchanged key gets no op and a missing map is added whole.
Keys are JSON-Pointer escaped (``/`` -> ``~1``, ``~`` -> ``~0``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from events.values import AllocationSpec
from services.podspec import annotation_changes, canonical_labels, keys

Op = dict[str, Any]


def escape(token: str) -> str:
    """JSON-Pointer escaping of one path token (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


def map_ops(path: str, *, existing: Any, changes: Mapping[str, str | None]) -> list[Op]:
    """Ops setting (value) or removing (None) keys of the string map at ``path`` (added whole if absent)."""
    if not isinstance(existing, Mapping):
        added = {k: v for k, v in changes.items() if v is not None}
        return [{"op": "add", "path": path, "value": added}] if added else []
    ops: list[Op] = []
    for name, value in changes.items():
        pointer = f"{path}/{escape(name)}"
        if value is None:
            if name in existing:
                ops.append({"op": "remove", "path": pointer})
        else:
            ops.append({"op": "replace" if name in existing else "add", "path": pointer, "value": value})
    return ops


def _gate_ops(spec: Mapping[str, Any]) -> list[Op]:
    gates = spec.get("schedulingGates")
    gate = {"name": keys.SCHEDULING_GATE}
    if not isinstance(gates, list) or not gates:
        return [{"op": "add", "path": "/spec/schedulingGates", "value": [gate]}]
    if any(isinstance(g, Mapping) and g.get("name") == keys.SCHEDULING_GATE for g in gates):
        return []
    return [{"op": "add", "path": "/spec/schedulingGates/-", "value": gate}]


def _native_resource_ops(spec: Mapping[str, Any], native: tuple[str, ...]) -> list[Op]:
    ops: list[Op] = []
    for index, container in enumerate(spec.get("containers") or []):
        resources = container.get("resources") if isinstance(container, Mapping) else None
        if not isinstance(resources, Mapping):
            continue
        for section in ("limits", "requests"):
            values = resources.get(section)
            if isinstance(values, Mapping):
                ops.extend(
                    {"op": "remove", "path": f"/spec/containers/{index}/resources/{section}/{escape(n)}"}
                    for n in native
                    if n in values
                )
    return ops


def build_patch(pod: Mapping[str, Any], *, spec: AllocationSpec, native_resources: tuple[str, ...],
                extra_annotations: Mapping[str, str] | None = None) -> list[Op]:
    """All ops that turn ``pod`` into the admitted pod for ``spec`` (may be empty on a re-review);
    ``extra_annotations`` (the device plan's placeholders) are set with the canonical ones."""
    meta = pod.get("metadata") or {}
    raw_spec = pod.get("spec")
    pod_spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else None
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else None
    label_changes: dict[str, str | None] = {
        k: v for k, v in canonical_labels(spec).items() if (labels or {}).get(k) != v
    }
    changes = annotation_changes(spec, existing=annotations or {})
    changes.update({k: v for k, v in (extra_annotations or {}).items() if (annotations or {}).get(k) != v})
    ops = map_ops("/metadata/annotations", existing=annotations, changes=changes)
    ops += map_ops("/metadata/labels", existing=labels, changes=label_changes)
    ops += _native_resource_ops(pod_spec, native_resources)
    if not isinstance(raw_spec, Mapping):
        return ops
    return ops + _gate_ops(pod_spec)
