"""Autoscaling configuration: TensorFusion ``autoScalingConfig`` and its effective defaults.

Owns the wire shape of ``WorkloadProfile.spec.autoScalingConfig`` (camelCase, as in the CRD:
``autoSetResources``, ``cronScalingRules``, ``externalScaler``), its parsing rules (spec
TensorFusion's ``percentile_recommender.go``: unparsable floats and durations keep the code default silently),
and how an allocation carries it: admission copies the pod's ``tensor-fusion.ai/autoscale*``
annotations and the merged profile config (JSON) into ``AllocationSpec.attributes``
(keys below). Defaults are the code constants, not the stale API doc comments.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import msgspec

AUTOSCALE_ANNOTATION = "tensor-fusion.ai/autoscale"
AUTOSCALE_TARGET_ANNOTATION = "tensor-fusion.ai/autoscale-target"
DEDICATED_GPU_ANNOTATION = "tensor-fusion.ai/dedicated-gpu"
CONFIG_ATTRIBUTE = "gpuledger.io/autoscaling-config"
"""Attribute holding the WorkloadProfile's ``autoScalingConfig`` as JSON (admission writes it)."""

TARGET_RESOURCES = ("compute", "vram", "all")


class ResourceAmount(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A TensorFusion ``Resource``: quantity strings ``tflops``, ``compute`` (percent), ``vram``."""

    tflops: str = ""
    compute: str = ""
    vram: str = ""


class ResourcesSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A TensorFusion ``Resources``: per-GPU ``requests`` and ``limits``."""

    requests: ResourceAmount = ResourceAmount()
    limits: ResourceAmount = ResourceAmount()


class AutoSetResources(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """``autoSetResources``: floats and durations are strings in the CRD (numbers accepted too)."""

    enable: bool = False
    target_resource: str = ""
    target_compute_percentile: str | float = ""
    lower_bound_compute_percentile: str | float = ""
    upper_bound_compute_percentile: str | float = ""
    target_vram_percentile: str | float = msgspec.field(default="", name="targetVRAMPercentile")
    lower_bound_vram_percentile: str | float = msgspec.field(default="", name="lowerBoundVRAMPercentile")
    upper_bound_vram_percentile: str | float = msgspec.field(default="", name="upperBoundVRAMPercentile")
    margin_fraction: str | float = ""
    update_threshold: str | float = ""
    min_compute_resources_ratio: str | float = ""
    max_compute_resources_ratio: str | float = ""
    min_vram_resources_ratio: str | float = msgspec.field(default="", name="minVRAMResourcesRatio")
    max_vram_resources_ratio: str | float = msgspec.field(default="", name="maxVRAMResourcesRatio")
    history_data_period: str = ""
    initial_delay_period: str = ""
    interval: str = ""


class CronScalingRule(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """A time-window override: active in ``[start fire, end fire)`` (5-field cron each)."""

    enable: bool = False
    name: str = ""
    start: str = ""
    end: str = ""
    desired_resources: ResourcesSpec = ResourcesSpec()


class ExternalScaler(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """``externalScaler``: an HTTP recommender (``interval`` is declared upstream but unused)."""

    enable: bool = False
    url: str = ""
    api_key_secret_ref: dict[str, str] | None = None
    initial_delay_period: str = ""
    interval: str = ""


class AutoScalingConfig(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """``WorkloadProfile.spec.autoScalingConfig``."""

    auto_set_resources: AutoSetResources | None = None
    cron_scaling_rules: tuple[CronScalingRule, ...] = ()
    external_scaler: ExternalScaler | None = None


class PercentileConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Effective numbers of the percentile recommender (code defaults of percentile_recommender.go)."""

    target_compute: float = 0.95
    lower_compute: float = 0.5
    upper_compute: float = 0.99
    target_vram: float = 0.98
    lower_vram: float = 0.5
    upper_vram: float = 0.99
    margin_fraction: float = 0.15
    update_threshold: float = 0.10
    min_compute_ratio: float = 0.1
    max_compute_ratio: float = 10.0
    min_vram_ratio: float = 0.2
    max_vram_ratio: float = 5.0
    history_period: timedelta = timedelta(hours=2)
    initial_delay: timedelta = timedelta(minutes=30)
    interval: timedelta | None = None


class ConfigError(ValueError):
    """The config attribute or file is not an autoScalingConfig; the message names the field."""


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
MAX_HISTORY_PERIOD = timedelta(days=30)


def parse_duration(text: str) -> timedelta | None:
    """Go ``time.ParseDuration`` (``"1h30m"``, ``"10s"``, ``"0"``); None when it does not parse."""
    text = text.strip()
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    if body == "0":
        return timedelta(0)
    if not body or _DURATION.sub("", body):
        return None
    seconds = sum(float(n) * _UNIT[u] for n, u in _DURATION.findall(body))
    return timedelta(seconds=sign * seconds)


def _float(value: str | float, default: float) -> float:
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(value) if value.strip() else default
    except ValueError:
        return default


def percentile_config(auto: AutoSetResources | None) -> PercentileConfig:
    """Effective settings: each unparsable or empty field keeps its default (as TensorFusion)."""
    base = PercentileConfig()
    if auto is None:
        return base
    floats = {name: _float(getattr(auto, field), getattr(base, name)) for name, field in _FLOAT_FIELDS.items()}
    history = parse_duration(auto.history_data_period) if auto.history_data_period else None
    delay = parse_duration(auto.initial_delay_period) if auto.initial_delay_period else None
    interval = parse_duration(auto.interval) if auto.interval else None
    return msgspec.structs.replace(
        base, **floats,
        history_period=history if history and history > timedelta(0) else base.history_period,
        initial_delay=delay if delay is not None and delay >= timedelta(0) else base.initial_delay,
        interval=interval if interval and interval > timedelta(0) else None,
    )


_FLOAT_FIELDS = {
    "target_compute": "target_compute_percentile", "lower_compute": "lower_bound_compute_percentile",
    "upper_compute": "upper_bound_compute_percentile", "target_vram": "target_vram_percentile",
    "lower_vram": "lower_bound_vram_percentile", "upper_vram": "upper_bound_vram_percentile",
    "margin_fraction": "margin_fraction", "update_threshold": "update_threshold",
    "min_compute_ratio": "min_compute_resources_ratio", "max_compute_ratio": "max_compute_resources_ratio",
    "min_vram_ratio": "min_vram_resources_ratio", "max_vram_ratio": "max_vram_resources_ratio",
}


def half_life(config: PercentileConfig) -> timedelta:
    """Histogram half-life: ``historyDataPeriod / 2`` (TensorFusion; 1 h by default)."""
    return config.history_period / 2


def parse_config(payload: Any, *, field: str = "autoScalingConfig") -> AutoScalingConfig:
    """Convert a decoded JSON/YAML mapping into AutoScalingConfig; ConfigError names the bad path."""
    try:
        return msgspec.convert(payload or {}, AutoScalingConfig, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"invalid {field}: {exc}") from exc


def from_attributes(attributes: Mapping[str, str]) -> AutoScalingConfig:
    """The config an allocation carries: the JSON config attribute, then the annotations on top.

    ``tensor-fusion.ai/autoscale: "true"`` sets enable and target ``all`` (or the
    ``autoscale-target`` value), even over the profile's target (TensorFusion ``internal/webhook/v1/tf_parser.go``).
    Raises ConfigError when the JSON attribute is malformed.
    """
    raw = attributes.get(CONFIG_ATTRIBUTE, "")
    try:
        config = parse_config(msgspec.json.decode(raw) if raw else {}, field=CONFIG_ATTRIBUTE)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"invalid {CONFIG_ATTRIBUTE}: {exc}") from exc
    if attributes.get(AUTOSCALE_ANNOTATION, "").strip().lower() != "true":
        return config
    target = attributes.get(AUTOSCALE_TARGET_ANNOTATION, "").strip() or "all"
    auto = config.auto_set_resources or AutoSetResources()
    auto = msgspec.structs.replace(auto, enable=True, target_resource=target)
    return msgspec.structs.replace(config, auto_set_resources=auto)


def is_active(config: AutoScalingConfig) -> bool:
    """Whether the recommenders run at all: ``autoSetResources.enable`` (cron included, as TensorFusion)."""
    return config.auto_set_resources is not None and config.auto_set_resources.enable


def is_enabled(config: AutoScalingConfig) -> bool:
    """``IsAutoSetResourcesEnabled``: enable is true and a target resource is set (TensorFusion)."""
    auto = config.auto_set_resources
    return auto is not None and auto.enable and auto.target_resource.strip() != ""


def should_scale(config: AutoScalingConfig, resource: str) -> bool:
    """Whether ``resource`` (``compute`` or ``vram``) is written back (case-insensitive, as TensorFusion)."""
    auto = config.auto_set_resources
    target = auto.target_resource.strip().lower() if auto else ""
    return target == "all" or target == resource
