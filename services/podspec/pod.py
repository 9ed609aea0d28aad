"""What admission reads from the Pod object itself: containers, native GPU limits, CPU/memory, owner.

Native device-plugin limits (``nvidia.com/gpu: 2``) in a TensorFusion pod become ``gpu-count``
(TensorFusion ``parseNativeGPUResource``, internal/webhook/v1/tf_parser.go). The workload name follows the
controller owner chain (``ParseTensorFusionInfo`` in the same file); without an API lookup a
ReplicaSet named ``<deployment>-<pod-template-hash>`` is resolved to its Deployment by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from events import quantity
from services.podspec import keys
from services.podspec.errors import PodSpecError


class NativeGpus(msgspec.Struct, kw_only=True):
    """Native GPU limits found in the pod: total count, per container, and the implied vendor."""

    count: int = 0
    per_container: dict[str, int] = {}
    vendor: str = ""


def containers(pod: Mapping[str, Any], *, kind: str = "containers") -> list[Mapping[str, Any]]:
    """``spec.containers`` (or ``initContainers``) as a list of mappings; bad shapes -> []."""
    items = (pod.get("spec") or {}).get(kind) or []
    return [c for c in items if isinstance(c, Mapping)] if isinstance(items, list) else []


def native_gpus(pod: Mapping[str, Any], *, resource_names: tuple[str, ...]) -> NativeGpus:
    """Sum integer native GPU limits per container; non-integer or <= 0 values are skipped (TF)."""
    found = NativeGpus()
    for container in containers(pod):
        limits = (container.get("resources") or {}).get("limits") or {}
        for name in resource_names:
            raw = limits.get(name) if isinstance(limits, Mapping) else None
            if raw is None:
                continue
            try:
                canonical = quantity.format_milli(quantity.to_milli(str(raw)))
                count = int(canonical)
            except (quantity.QuantityError, ValueError):
                continue
            if count <= 0:
                continue
            found.per_container[str(container.get("name", ""))] = count
            found.count += count
            found.vendor = found.vendor or keys.RESOURCE_VENDORS.get(name, "")
    return found


def _quantity(raw: object, *, field: str, scale: int) -> int:
    """A resource request in millicores (``scale`` 1000) or units; PodSpecError naming ``field`` when
    it is not a quantity or is negative (the API server's rule: requests must be >= 0)."""
    try:
        value = quantity.to_milli(str(raw)) if scale == 1000 else quantity.to_value(str(raw))
    except quantity.QuantityError:
        raise PodSpecError(f"{field}={raw!r}: not a Kubernetes quantity", field=field, value=str(raw)) from None
    if value < 0:
        raise PodSpecError(f"{field}={raw!r}: must be greater than or equal to 0", field=field, value=str(raw))
    return value


def _requests(pod: Mapping[str, Any], kind: str, name: str, *, scale: int) -> list[int]:
    out = []
    for index, container in enumerate(containers(pod, kind=kind)):
        requests = (container.get("resources") or {}).get("requests")
        raw = requests.get(name) if isinstance(requests, Mapping) else None
        if raw is not None:
            out.append(_quantity(raw, field=f"spec.{kind}[{index}].resources.requests.{name}", scale=scale))
    return out


def cpu_memory(pod: Mapping[str, Any]) -> tuple[int, int]:
    """The pod's effective CPU (millicores) and memory (bytes) requests.

    Kubernetes rule: max(sum over containers, max over init containers) + ``spec.overhead``.
    Raises PodSpecError naming the container field of a malformed quantity.
    """
    overhead = (pod.get("spec") or {}).get("overhead")
    totals = []
    for name, scale in (("cpu", 1000), ("memory", 1)):
        app = sum(_requests(pod, "containers", name, scale=scale))
        init = max(_requests(pod, "initContainers", name, scale=scale), default=0)
        extra = overhead.get(name) if isinstance(overhead, Mapping) else None
        totals.append(
            max(app, init) + (0 if extra is None else _quantity(extra, field=f"spec.overhead.{name}", scale=scale))
        )
    return totals[0], totals[1]


def workload_name(pod: Mapping[str, Any], *, resolved_owner: str = "", suffix: str = "") -> str:
    """Controller owner name (a ReplicaSet resolves to its Deployment), else pod name, else generateName.

    ``resolved_owner`` wins when the caller looked the chain up. A pod with only ``generateName``
    gets ``<generateName>-<suffix>`` (TensorFusion appends 8 random characters; we take a stable
    suffix from the caller, e.g. the review UID, so a replay yields the same name).
    """
    if resolved_owner:
        return resolved_owner
    meta = pod.get("metadata") or {}
    owners = meta.get("ownerReferences") or []
    controller = next((o for o in owners if isinstance(o, Mapping) and o.get("controller")), None)
    if controller and controller.get("name"):
        name = str(controller["name"])
        template_hash = (meta.get("labels") or {}).get("pod-template-hash", "")
        if controller.get("kind") == "ReplicaSet" and template_hash and name.endswith(f"-{template_hash}"):
            return name[: -len(template_hash) - 1]
        return name
    if meta.get("name"):
        return str(meta["name"])
    return f"{meta.get('generateName') or ''}-{suffix[:8]}"
