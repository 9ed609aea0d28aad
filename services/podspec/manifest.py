"""A Pod from any manifest a user would ``kubectl apply``: a Pod, or a workload's pod template.

For ``gpuledger submit/simulate`` and tests: a Deployment, ReplicaSet, StatefulSet, DaemonSet, Job or
CronJob yields the pod its controller would create (template labels and annotations, the
workload's namespace, a controller ownerReference naming the workload, so the workload name
resolves as in admission) and the desired replica count used for gang sizing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.podspec.errors import PodSpecError

_CONTROLLERS = {"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob"}


def _template(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = doc.get("spec") or {}
    if doc.get("kind") == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    template = spec.get("template") if isinstance(spec, Mapping) else None
    if not isinstance(template, Mapping):
        raise PodSpecError(f"{doc.get('kind')}.spec.template: missing pod template", field="spec.template")
    return template


def pod_from_manifest(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The Pod of ``doc`` (returned as is for a Pod); raises PodSpecError for other kinds."""
    kind = doc.get("kind")
    if kind == "Pod":
        return dict(doc)
    if kind not in _CONTROLLERS:
        raise PodSpecError(
            f"kind={kind!r}: expected a Pod or a workload ({', '.join(sorted(_CONTROLLERS))})",
            field="kind",
            value=str(kind),
        )
    meta = doc.get("metadata") or {}
    template = _template(doc)
    pod_meta = dict(template.get("metadata") or {})
    pod_meta["namespace"] = pod_meta.get("namespace") or meta.get("namespace") or "default"
    pod_meta["generateName"] = f"{meta.get('name', 'pod')}-"
    pod_meta["ownerReferences"] = [
        {
            "apiVersion": str(doc.get("apiVersion", "")),
            "kind": str(kind),
            "name": str(meta.get("name", "")),
            "controller": True,
        }
    ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": dict(template.get("spec") or {})}


def workload_replicas(doc: Mapping[str, Any]) -> int | None:
    """Desired pods of a workload: ``spec.replicas``, else ``parallelism``, else ``completions`` (None: unknown)."""
    spec = doc.get("spec") or {}
    if doc.get("kind") == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    for name in ("replicas", "parallelism", "completions"):
        value = spec.get(name) if isinstance(spec, Mapping) else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
