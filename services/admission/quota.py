"""GPUResourceQuota (tensor-fusion.ai/v1) object -> events.values.QuotaSpec (pure).

Schema (TensorFusion api/v1/gpuresourcequota_types.go): ``spec.total.{requests,limits}.{tflops,vram}``,
``total.maxWorkers``, ``total.alertThresholdPercent``, ``spec.single.{maxRequests,maxLimits,
defaultRequests,defaultLimits}.{tflops,vram}``, ``single.maxGPUCount``. Quantities are
Kubernetes strings; a bad one raises PodSpecError naming the path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from events import quantity
from events.values import QuotaAmount, QuotaSpec, Resources
from services.podspec import PodSpecError


def _values(raw: Any, *, field: str) -> dict[str, int] | None:
    if not isinstance(raw, Mapping) or not raw:
        return None
    values: dict[str, int] = {}
    for name, scale in (("tflops", 1000), ("vram", 1)):
        text = raw.get(name)
        if text is None:
            continue
        try:
            values[name] = quantity.to_milli(str(text)) if scale == 1000 else quantity.to_value(str(text))
        except quantity.QuantityError:
            raise PodSpecError(
                f"{field}.{name}={text!r}: not a Kubernetes quantity", field=f"{field}.{name}", value=str(text)
            ) from None
    return values


def _amount(raw: Any, *, field: str) -> QuotaAmount | None:
    values = _values(raw, field=field)
    return None if values is None else QuotaAmount(milli_tflops=values.get("tflops"), vram_bytes=values.get("vram"))


def _resources(raw: Any, *, field: str) -> Resources | None:
    values = _values(raw, field=field)
    if values is None:
        return None
    return Resources(milli_tflops=values.get("tflops", 0), vram_bytes=values.get("vram", 0))


def _int(raw: Any, *, field: str) -> int | None:
    if raw is None:
        return None
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 0:
        raise PodSpecError(f"{field}={raw!r}: must be a non-negative integer", field=field, value=str(raw))
    return raw


def _section(parent: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = parent.get(name)
    return value if isinstance(value, Mapping) else {}


def parse_quota(obj: Mapping[str, Any]) -> QuotaSpec:
    """The QuotaSpec of a GPUResourceQuota object; raises PodSpecError on a malformed field."""
    spec = _section(obj, "spec")
    total, single = _section(spec, "total"), _section(spec, "single")
    threshold = _int(total.get("alertThresholdPercent"), field="spec.total.alertThresholdPercent")
    if threshold is not None and threshold > 100:  # TensorFusion quota_store.go validateQuotaConfig
        raise PodSpecError(f"alertThresholdPercent must be between 0 and 100, got {threshold}",
                           field="spec.total.alertThresholdPercent", value=str(threshold))
    return QuotaSpec(
        total_requests=_amount(total.get("requests"), field="spec.total.requests"),
        total_limits=_amount(total.get("limits"), field="spec.total.limits"),
        max_workers=_int(total.get("maxWorkers"), field="spec.total.maxWorkers"),
        max_requests=_amount(single.get("maxRequests"), field="spec.single.maxRequests"),
        max_limits=_amount(single.get("maxLimits"), field="spec.single.maxLimits"),
        max_gpu_count=_int(single.get("maxGPUCount"), field="spec.single.maxGPUCount"),
        default_requests=_resources(single.get("defaultRequests"), field="spec.single.defaultRequests"),
        default_limits=_resources(single.get("defaultLimits"), field="spec.single.defaultLimits"),
        alert_threshold_percent=95 if threshold is None else threshold,
    )
