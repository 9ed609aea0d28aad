"""The percentile recommender: estimates from the histograms -> a request/limit recommendation.

TensorFusion ``internal/autoscaler/recommender/percentile_recommender.go``: six
estimates ``int(p-th percentile × (1 + margin))``, the QoS choice of lower/target/upper as the
request, floors of 1 TFLOPS and 1 GiB, ratio bands around the original spec, the compute limit
held at the original limit, and the update threshold on requests. TFLOPS estimates are whole
TFLOPS as upstream (int64 truncation); bounds are computed in milli-TFLOPS. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta

import msgspec

from events.quantity import format_bytes, format_milli
from events.values import Resources
from services.autoscaler.aggregator import WorkloadAggregator
from services.autoscaler.config import PercentileConfig
from services.autoscaler.recommendation import Outcome, RequestLimit, scales_up

Processor = Callable[[RequestLimit], tuple[RequestLimit, str]]
"""The recommendation processor: caps a scaled-up recommendation, returns it and a message."""

TFLOPS_FLOOR = 1000
"""1 TFLOPS, in milli-TFLOPS: the lowest request and limit the recommender gives."""
VRAM_FLOOR = 1 << 30
"""1 GiB: the lowest VRAM request and limit."""
_MAX_ESTIMATE = 1e14


class Estimates(msgspec.Struct, frozen=True, kw_only=True):
    """Lower, target and upper estimates (milli-TFLOPS, bytes)."""

    lower: Resources
    target: Resources
    upper: Resources


def _estimate(value: float, margin: float) -> float:
    base = min(max(value, 0.0), _MAX_ESTIMATE)
    return base + min(max(base * margin, 0.0), _MAX_ESTIMATE)


def estimate(agg: WorkloadAggregator, config: PercentileConfig) -> Estimates | None:
    """The six estimates (``recommender/estimator.go``); None when both histograms are empty."""
    if agg.is_empty():
        return None
    margin = config.margin_fraction

    def one(p_tflops: float, p_vram: float) -> Resources:
        tflops = int(_estimate(agg.tflops.percentile(p_tflops), margin))
        vram = int(_estimate(agg.vram.percentile(p_vram), margin))
        return Resources(milli_tflops=tflops * 1000, vram_bytes=vram)

    return Estimates(lower=one(config.lower_compute, config.lower_vram),
                     target=one(config.target_compute, config.target_vram),
                     upper=one(config.upper_compute, config.upper_vram))


def _clamp(value: int, original: int, low: float, high: float) -> int:
    lower, upper = original * low, original * high
    if lower and value < lower:
        return int(lower)
    if upper and value > upper:
        return int(upper)
    return value


def _pick(est: Estimates, qos: str, field: str) -> int:
    chosen = est.upper if qos == "critical" else est.target if qos == "high" else est.lower
    return int(getattr(chosen, field))


def _resource(est: Estimates, *, qos: str, field: str, floor: int, original: RequestLimit,
              low: float, high: float) -> tuple[int, int]:
    """(request, limit) of one resource after floors, ratio bands and the compute-limit rule."""
    req = max(_pick(est, qos, field), floor)
    lim = max(int(getattr(est.upper, field)), floor)
    req = _clamp(req, getattr(original.request, field), low, high)
    lim = _clamp(lim, getattr(original.limit, field), low, high)
    if field == "milli_tflops":
        lim = max(lim, original.limit.milli_tflops)
    return req, lim


def propose(est: Estimates, *, config: PercentileConfig, qos: str, current: RequestLimit,
            original: RequestLimit) -> tuple[RequestLimit, list[str]]:
    """Per resource, as ``Recommend`` in ``percentile_recommender.go``: the recommendation before the
    threshold, with its "... scaled" messages."""
    tf_req, tf_lim = _resource(est, qos=qos, field="milli_tflops", floor=TFLOPS_FLOOR, original=original,
                               low=config.min_compute_ratio, high=config.max_compute_ratio)
    vr_req, vr_lim = _resource(est, qos=qos, field="vram_bytes", floor=VRAM_FLOOR, original=original,
                               low=config.min_vram_ratio, high=config.max_vram_ratio)
    messages = []
    cur_tf = (current.request.milli_tflops, current.limit.milli_tflops)
    if (tf_req, tf_lim) == cur_tf:
        tf_req, tf_lim = cur_tf
    else:
        messages.append(f"Compute scaled: request {format_milli(cur_tf[0])} -> {format_milli(tf_req)}, "
                        f"limit {format_milli(cur_tf[1])} -> {format_milli(tf_lim)}")
    cur_vr = (current.request.vram_bytes, current.limit.vram_bytes)
    if (vr_req, vr_lim) != cur_vr:
        messages.append(f"VRAM scaled: request {format_bytes(cur_vr[0])} -> {format_bytes(vr_req)}, "
                        f"limit {format_bytes(cur_vr[1])} -> {format_bytes(vr_lim)}")
    rec = RequestLimit(request=Resources(milli_tflops=tf_req, vram_bytes=vr_req),
                       limit=Resources(milli_tflops=tf_lim, vram_bytes=vr_lim))
    return rec, messages


def exceeds_threshold(rec: RequestLimit, current: RequestLimit, threshold: float) -> bool | None:
    """The update threshold of ``percentile_recommender.go``: True if some request moves by more than
    ``threshold`` (relative, whole units).

    None when no request could be checked (a zero on either side).
    """
    pairs = ((math.ceil(current.request.milli_tflops / 1000), math.ceil(rec.request.milli_tflops / 1000)),
             (current.request.vram_bytes, rec.request.vram_bytes))
    checked = [(c, r) for c, r in pairs if c and r]
    if not checked:
        return None
    return any(abs(c - r) > int(c * threshold) for c, r in checked)


def recommend(agg: WorkloadAggregator, *, config: PercentileConfig, qos: str, current: RequestLimit,
              original: RequestLimit, processor: Processor | None, started_at: datetime | None,
              now: datetime) -> Outcome | None:
    """The whole percentile recommender (``percentile_recommender.go``); None when there is no estimate.

    ``started_at`` is when the workload was first seen (granted); ``processor`` runs when a request
    grows (the engine passes the per-worker headroom cap). A young workload gives a LowConfidence no-op.
    """
    young = started_at is not None and now - started_at < config.initial_delay
    return from_estimates(None if young else estimate(agg, config), config=config, qos=qos, current=current,
                          original=original, processor=processor, young=young)


def from_estimates(est: Estimates | None, *, config: PercentileConfig, qos: str, current: RequestLimit,
                   original: RequestLimit, processor: Processor | None, young: bool = False) -> Outcome | None:
    """``Recommend`` of ``percentile_recommender.go`` past its nil check, given the estimates (None: none)."""
    if young:
        return Outcome(resources=ZERO_REC, has_applied=True, reason="LowConfidence",
                       message=f"workload younger than initialDelayPeriod {_fmt(config.initial_delay)}")
    if est is None:
        return None
    rec, messages = propose(est, config=config, qos=qos, current=current, original=original)
    if not rec.is_zero() and exceeds_threshold(rec, current, config.update_threshold) is False:
        return Outcome(resources=rec, has_applied=True, reason="InsideUpdateThreshold",
                       message="requests within the update threshold "
                               f"({config.update_threshold:g}) of the current values")
    if processor is not None and scales_up(rec, current):
        rec, note = processor(rec)
        messages.extend([note] if note else [])
    applied = rec == current
    return Outcome(resources=rec, has_applied=applied, reason="" if applied else "Updated",
                   message="; ".join(messages))


ZERO_REC = RequestLimit()


def _fmt(delta: timedelta) -> str:
    return f"{int(delta.total_seconds())}s"
