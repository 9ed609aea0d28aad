"""The pod skeleton admission writes so that the binder's grant reaches the containers.

A pod's containers, volumes and ``runtimeClassName`` cannot change after creation, and a gated
pod's only mutable scheduling fields are its node selector, affinity, tolerations and gates
(KEP-3838); annotations can change at any time and the kubelet resolves an environment variable's
``valueFrom.fieldRef`` ``metadata.annotations['<key>']`` when it starts the container. So at
CREATE the webhook (this module) gives every GPU container one such variable per name of the
*request's* :class:`~services.podspec.device_plan.DevicePlan` (placeholders: ``void``, ""), the
RuntimeClass, and the node-side volumes; at bind the binder writes the *grant's* values into the
annotations before it removes the scheduling gate; the kubelet reads them when the pod starts.
Pure JSONPatch builders.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.admission.patch import Op
from services.podspec.device_plan import NO_DEVICE, VISIBLE_DEVICES, DevicePlan, env_annotation


def _env_var(name: str, annotation: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{annotation}']"}}}


def container_env(plan: DevicePlan, container: str) -> list[dict[str, Any]]:
    """The variables admission gives ``container``: fieldRefs to the plan's annotations, or
    ``NVIDIA_VISIBLE_DEVICES=void`` for a container outside every group."""
    group = plan.group_of(container)
    if group is None:
        return [{"name": VISIBLE_DEVICES, "value": NO_DEVICE}]
    return [_env_var(name, env_annotation(group.container, name)) for name in group.env]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _container_ops(path: str, container: Mapping[str, Any], ours: list[dict[str, Any]],
                   mounts: tuple[dict[str, Any], ...]) -> list[Op]:
    names = {e["name"] for e in ours}
    theirs = [e for e in _list(container.get("env")) if not (isinstance(e, Mapping) and e.get("name") in names)]
    ops: list[Op] = [{"op": "add", "path": f"{path}/env", "value": ours + theirs}]  # add replaces a member
    if mounts:
        paths = {m["mountPath"] for m in mounts}
        kept = [m for m in _list(container.get("volumeMounts"))
                if not (isinstance(m, Mapping) and m.get("mountPath") in paths)]
        ops.append({"op": "add", "path": f"{path}/volumeMounts", "value": kept + list(mounts)})
    return ops


def skeleton_ops(pod: Mapping[str, Any], plan: DevicePlan) -> list[Op]:
    """JSONPatch ops giving ``pod`` the request plan's environment, RuntimeClass and volumes.

    Every container's (and init container's) own ``NVIDIA_VISIBLE_DEVICES`` and the plan's other
    variables are replaced, so a pod cannot choose its devices or escape its limits through its
    environment (an image's own ``ENV`` is overridden by the container's). Mode ``tensor-fusion``
    changes nothing here (TensorFusion's runtime reads the annotations). Annotations are not
    written here: :func:`services.admission.patch.build_patch` takes ``plan.annotations``.
    """
    if plan.enforcement == "tensor-fusion":
        return []
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return []
    ops: list[Op] = []
    if plan.runtime_class and not spec.get("runtimeClassName"):
        ops.append({"op": "add", "path": "/spec/runtimeClassName", "value": plan.runtime_class})
    if plan.volumes:
        names = {v["name"] for v in plan.volumes}
        kept = [v for v in _list(spec.get("volumes")) if not (isinstance(v, Mapping) and v.get("name") in names)]
        ops.append({"op": "add", "path": "/spec/volumes", "value": kept + list(plan.volumes)})
    for index, container in enumerate(_list(spec.get("containers"))):
        if isinstance(container, Mapping):
            name = str(container.get("name") or "")
            group = plan.group_of(name)
            ops += _container_ops(f"/spec/containers/{index}", container, container_env(plan, name),
                                  group.mounts if group is not None else ())
    for index, container in enumerate(_list(spec.get("initContainers"))):
        if isinstance(container, Mapping):
            ops += _container_ops(f"/spec/initContainers/{index}", container,
                                  [{"name": VISIBLE_DEVICES, "value": NO_DEVICE}], ())
    return ops

