"""WorkloadProfile (tensor-fusion.ai/v1) -> the fields admission takes from it.

Accepts the whole custom object or only its ``spec``. Field names follow the CRD
(``resources.{requests,limits}.{tflops,compute,vram}``, ``gpuCount``, ``qos``, ``gpuModel``,
``vendor``, ``sidecarWorker``, ``partitionTemplateId``, ``replicas``, ``nodeAffinity``,
``autoScalingConfig``, ``gangScheduling``). Per TensorFusion, ``poolName``, ``isLocalGPU``,
``isolation`` and ``gpuIndices`` are read but never used
(TensorFusion internal/webhook/v1/tf_parser.go; see docs/compatibility.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from events import quantity
from events.values import QOS_LEVELS, NodeAffinity
from services.podspec.affinity import parse_node_affinity
from services.podspec.errors import PodSpecError

_PREFIX = "WorkloadProfile.spec"


class Side(msgspec.Struct, kw_only=True):
    """One side (request or limit) while composing: milli-TFLOPS, milli-percent, bytes."""

    tflops: int = 0
    percent: int = 0
    vram: int = 0


class Profile(msgspec.Struct, kw_only=True):
    """What admission uses from a WorkloadProfile spec (all zero/empty when there is none)."""

    name: str = ""
    request: Side = msgspec.field(default_factory=Side)
    limit: Side = msgspec.field(default_factory=Side)
    gpu_count: int = 0
    qos: str = ""
    gpu_model: str = ""
    vendor: str = ""
    sidecar_worker: bool = False
    partition_template: str = ""
    replicas: int | None = None
    node_affinity: NodeAffinity | None = None
    autoscale: bool = False
    autoscale_target: str = ""
    autoscaling_config: str = ""
    """The profile's whole ``autoScalingConfig`` as canonical JSON ("" when absent), for the autoscaler."""
    gang: dict[str, Any] | None = None
    worker_pod_template: bool = False


def _quantity(raw: Any, *, field: str, scale: int) -> int:
    if raw is None or raw == "":
        return 0
    text = str(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else raw
    try:
        value = quantity.parse(text)
    except quantity.QuantityError:
        raise PodSpecError(f"{field}={raw!r}: not a Kubernetes quantity", field=field, value=str(raw)) from None
    if value < 0:
        raise PodSpecError(f"{field}={raw!r}: must not be negative", field=field, value=str(raw))
    return quantity.to_milli(text) if scale == 1000 else quantity.to_value(text)


def _side(raw: Any, *, field: str) -> Side:
    if not isinstance(raw, Mapping):
        return Side()
    return Side(
        tflops=_quantity(raw.get("tflops"), field=f"{field}.tflops", scale=1000),
        percent=_quantity(raw.get("compute"), field=f"{field}.compute", scale=1000),
        vram=_quantity(raw.get("vram"), field=f"{field}.vram", scale=1),
    )


def _int(spec: Mapping[str, Any], name: str) -> int | None:
    raw = spec.get(name)
    if raw is None:
        return None
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise PodSpecError(f"{_PREFIX}.{name}={raw!r}: must be an integer", field=f"{_PREFIX}.{name}", value=str(raw))
    return raw


def _str(spec: Mapping[str, Any], name: str) -> str:
    raw = spec.get(name) or ""
    if not isinstance(raw, str):
        raise PodSpecError(f"{_PREFIX}.{name}={raw!r}: must be a string", field=f"{_PREFIX}.{name}", value=str(raw))
    return raw


def parse_profile(obj: Mapping[str, Any]) -> Profile:
    """Parse a WorkloadProfile object (or its spec); raises PodSpecError naming the spec path."""
    spec = obj.get("spec", obj) if "spec" in obj or "metadata" in obj else obj
    spec = spec if isinstance(spec, Mapping) else {}
    resources = spec.get("resources") or {}
    resources = resources if isinstance(resources, Mapping) else {}
    qos = _str(spec, "qos")
    if qos and qos not in QOS_LEVELS:
        raise PodSpecError(
            f"{_PREFIX}.qos={qos!r}: must be one of {', '.join(QOS_LEVELS)}",
            field=f"{_PREFIX}.qos",
            value=qos,
        )
    config = spec.get("autoScalingConfig")
    auto = (config or {}).get("autoSetResources") or {} if isinstance(config, Mapping) else {}
    gang = spec.get("gangScheduling")
    return Profile(
        name=str((obj.get("metadata") or {}).get("name", "")),
        request=_side(resources.get("requests"), field=f"{_PREFIX}.resources.requests"),
        limit=_side(resources.get("limits"), field=f"{_PREFIX}.resources.limits"),
        gpu_count=_int(spec, "gpuCount") or 0,
        qos=qos,
        gpu_model=_str(spec, "gpuModel"),
        vendor=_str(spec, "vendor"),
        sidecar_worker=spec.get("sidecarWorker") is True,
        partition_template=_str(spec, "partitionTemplateId"),
        replicas=_int(spec, "replicas"),
        node_affinity=parse_node_affinity(spec.get("nodeAffinity"), field=f"{_PREFIX}.nodeAffinity"),
        autoscale=auto.get("enable") is True if isinstance(auto, Mapping) else False,
        autoscale_target=str(auto.get("targetResource") or "") if isinstance(auto, Mapping) else "",
        autoscaling_config=msgspec.json.encode(config, order="sorted").decode() if isinstance(config, Mapping) else "",
        gang=dict(gang) if isinstance(gang, Mapping) else None,
        worker_pod_template=bool(spec.get("workerPodTemplate")),
    )
