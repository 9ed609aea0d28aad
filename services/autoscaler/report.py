"""What ``gpuledger recommend`` prints: estimates, the recommendation and why, for one workload.

Owns the report shape (the CLI's JSON output contract, docs/operations.md): ``{"workload", "namespace",
"tflops": {"lower", "target", "upper"}, "vram": {...}, "request": {"tflops", "vram"},
"limit": {...}, "applied", "reason", "message", "samples"}`` with canonical Kubernetes quantity
strings, and the offline computation from a samples file and a WorkloadProfile (the same
recommenders the service runs). ``applied`` is true when the recommendation is already in force.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, tzinfo
from typing import Any

from events.metrics import UsageSample
from events.quantity import format_bytes, format_milli
from events.values import Resources
from services.autoscaler import config as cfg
from services.autoscaler import cron, recommender
from services.autoscaler.aggregator import WorkloadAggregator
from services.autoscaler.engine import Engine, WorkloadState
from services.autoscaler.merge import MergedSample, SampleMerger
from services.autoscaler.recommendation import ZERO, Outcome, RequestLimit, describe, merge
from services.podspec.profile import parse_profile


def build(*, workload: str, namespace: str, agg: WorkloadAggregator | None, pconf: cfg.PercentileConfig,
          recommendation: RequestLimit | None, current: RequestLimit, reason: str, message: str) -> dict[str, Any]:
    """The report dict; with no recommendation, ``request``/``limit`` show ``current``."""
    est = recommender.estimate(agg, pconf) if agg is not None else None
    shown = recommendation or current

    def bounds(field: str, fmt: Any) -> dict[str, str | None]:
        if est is None:
            return {"lower": None, "target": None, "upper": None}
        return {name: fmt(getattr(getattr(est, name), field)) for name in ("lower", "target", "upper")}

    parts = describe(shown)
    return {
        "workload": workload, "namespace": namespace,
        "tflops": bounds("milli_tflops", format_milli), "vram": bounds("vram_bytes", format_bytes),
        "request": parts["request"], "limit": parts["limit"],
        "applied": shown == current, "reason": reason, "message": message,
        "samples": agg.sample_count if agg is not None else 0,
    }


class ProfileSettings:
    """What the offline form reads from a WorkloadProfile: resources, QoS and autoScalingConfig."""

    def __init__(self, obj: Mapping[str, Any]) -> None:
        profile = parse_profile(obj)
        self.name = profile.name
        self.qos = profile.qos or "medium"
        self.original = RequestLimit(
            request=_resources(profile.request.tflops, profile.request.vram),
            limit=_resources(profile.limit.tflops or profile.request.tflops,
                             profile.limit.vram or profile.request.vram))
        spec = obj.get("spec", obj) if isinstance(obj.get("spec"), Mapping) else obj
        self.config = cfg.parse_config(spec.get("autoScalingConfig"), field="spec.autoScalingConfig")


def _resources(milli_tflops: int, vram: int) -> Resources:
    return Resources(milli_tflops=milli_tflops, vram_bytes=vram)


def offline(samples: Iterable[UsageSample], profile: ProfileSettings, *, workload: str = "",
            default_tz: tzinfo = UTC, tensorfusion_vram_timing: bool = False) -> dict[str, Any]:
    """Replay ``samples`` into a fresh aggregator and run one round at the last sample's time.

    Each worker's samples of one minute are merged by max first, as the live engine does
    (:mod:`services.autoscaler.merge`, TensorFusion's metrics query).

    The workload's age is measured from its first sample. Raises cron.CronError for a bad rule.
    """
    pconf = cfg.percentile_config(profile.config.auto_set_resources)
    agg = WorkloadAggregator(half_life=cfg.half_life(pconf), tensorfusion_vram_timing=tensorfusion_vram_timing)
    namespace, name = "", workload or profile.name
    merger = SampleMerger()
    merged: list[MergedSample] = []
    for sample in sorted(samples, key=lambda s: s.at):
        _, done = merger.add(sample.allocation_id or sample.pod, milli_tflops=sample.milli_tflops_used,
                             vram_bytes=sample.vram_bytes_used, at=sample.at)
        merged.extend([done] if done else [])
        namespace, name = namespace or sample.namespace, name or sample.workload
    for one in sorted(merged + merger.flush(), key=lambda m: m.at):
        agg.add_sample(one.worker, milli_tflops=one.milli_tflops, vram_bytes=one.vram_bytes, at=one.at)
    now = agg.last_sample_at or datetime.now(UTC)
    current = profile.original
    outcomes: list[Outcome] = []
    percentile = recommender.recommend(agg, config=pconf, qos=profile.qos, current=current, original=current,
                                       processor=None, started_at=agg.first_sample_at, now=now)
    timed, _ = cron.recommend(profile.config.cron_scaling_rules, previous=None, original=current, current=current,
                              processor=None, now=now, default_tz=default_tz)
    outcomes.extend(o for o in (percentile, timed) if o is not None)
    last = next((o for o in reversed(outcomes) if o.reason), None)
    return build(workload=name, namespace=namespace, agg=agg, pconf=pconf,
                 recommendation=merge(outcomes, current=current), current=current,
                 reason=last.reason if last else "NoEstimate", message=last.message if last else "no usage samples")


def report_of(engine: Engine, workload: str, *, namespace: str = "") -> dict[str, Any]:
    """The live report of ``workload`` (any namespace when ``namespace`` is empty), or
    ``{"error", "field"}`` when it is unknown or matches several namespaces."""
    known = set(engine.view.workloads()) | set(engine.aggregators)
    matches = sorted(k for k in known if k[1] == workload and (not namespace or k[0] == namespace))
    if len(matches) != 1:
        what = "unknown" if not matches else "ambiguous (give --namespace)"
        return {"error": f"workload {workload!r} is {what}", "field": "workload"}
    key = matches[0]
    state = engine.states.get(key) or WorkloadState()
    workers = engine.view.workload_workers(key)
    try:
        pconf = cfg.percentile_config(engine.config_of(key).auto_set_resources)
    except cfg.ConfigError:
        pconf = cfg.PercentileConfig()
    current = workers[0].current if workers else (state.recommendation or ZERO)
    result = build(workload=key[1], namespace=key[0], agg=engine.aggregators.get(key), pconf=pconf,
                   recommendation=state.recommendation, current=current, reason=state.reason,
                   message=state.message)
    result["workers"] = len(workers)
    result["dropped_samples"] = dict(engine.dropped)
    return result
