"""The autoscaler's core: samples in, one evaluation round per workload, resize intents out.

Owns the per-workload state (histograms, the in-memory recommendation that becomes the next
round's "current", the active cron rule, the last condition) and one round of TensorFusion
``processSingleWorkload`` (TensorFusion internal/autoscaler/autoscaler.go): percentile, then cron,
then merge, then apply to every non-dedicated worker. A worker's samples of one minute are merged
by max before the histograms (:mod:`services.autoscaler.merge`, as TensorFusion's metrics query),
and a round flushes the merged samples of its workload first. Malformed (out-of-bounds, see
:func:`events.metrics.check_sample`) or unattributable samples are counted by reason and dropped.
No I/O and no clock: the service passes ``now`` and publishes.
"""

from __future__ import annotations

import functools
from collections import Counter
from datetime import UTC, datetime, timedelta, tzinfo

import msgspec
import structlog

from events import decisions, guard, intents
from events.bounds import BoundsError
from events.metrics import SampleError, UsageSample, check_sample
from services.autoscaler import config as cfg
from services.autoscaler import cron, external, recommender
from services.autoscaler.aggregator import WorkloadAggregator
from services.autoscaler.merge import MergedSample, SampleMerger
from services.autoscaler.recommendation import Outcome, RequestLimit, cap_to_headroom, merge
from services.autoscaler.resize import NewId, ResizeTracker, worker_target
from services.autoscaler.view import LedgerView, Worker, WorkloadKey

log = structlog.get_logger("gpuledger.autoscaler")


@functools.lru_cache(maxsize=4096)
def _config_of(config_json: str, autoscale: str, target: str) -> cfg.AutoScalingConfig:
    """Parsed config of one attribute combination (allocations of a workload share it)."""
    attrs = {cfg.CONFIG_ATTRIBUTE: config_json, cfg.AUTOSCALE_ANNOTATION: autoscale,
             cfg.AUTOSCALE_TARGET_ANNOTATION: target}
    return cfg.from_attributes({k: v for k, v in attrs.items() if v})


class WorkloadState(msgspec.Struct, kw_only=True):
    """What the autoscaler remembers about one workload between rounds (and across restarts)."""

    recommendation: RequestLimit | None = None
    active_cron: cfg.CronScalingRule | None = None
    reason: str = ""
    message: str = ""
    evaluated_at: datetime | None = None


class Engine:
    """Samples -> aggregators; ``evaluate`` -> ResizeAllocation intents; events -> view and retries."""

    def __init__(self, *, new_id: NewId, interval: timedelta = timedelta(seconds=30), default_tz: tzinfo = UTC,
                 max_retries: int = 2, tensorfusion_vram_timing: bool = False) -> None:
        self.view = LedgerView()
        self.tracker = ResizeTracker(new_id=new_id, max_retries=max_retries)
        self.aggregators: dict[WorkloadKey, WorkloadAggregator] = {}
        self.mergers: dict[WorkloadKey, SampleMerger] = {}
        self.states: dict[WorkloadKey, WorkloadState] = {}
        self.dropped: Counter[str] = Counter()
        self.touched: set[WorkloadKey] = set()
        self.interval, self.default_tz = interval, default_tz
        self.tensorfusion_vram_timing = tensorfusion_vram_timing

    def config_of(self, key: WorkloadKey) -> cfg.AutoScalingConfig:
        """The workload's config from its newest worker's attributes; ConfigError if malformed."""
        workers = self.view.workload_workers(key)
        if not workers:
            return cfg.AutoScalingConfig()
        newest = max(workers, key=lambda w: (w.granted_at, w.spec.allocation_id))
        attrs = newest.spec.attributes
        return _config_of(attrs.get(cfg.CONFIG_ATTRIBUTE, ""), attrs.get(cfg.AUTOSCALE_ANNOTATION, ""),
                          attrs.get(cfg.AUTOSCALE_TARGET_ANNOTATION, ""))

    def ingest(self, sample: UsageSample) -> str | None:
        """Feed one sample; returns the drop reason (also counted) or None when it was taken.

        The sample joins its worker's merged sample of that minute (max per worker per minute);
        a completed earlier minute goes into the workload's histograms.
        """
        try:
            check_sample(sample)
        except SampleError as exc:
            log.warning("usage sample dropped", reason="invalid", error=str(exc))
            self.dropped["invalid"] += 1
            return "invalid"
        worker = self.view.workers.get(sample.allocation_id) if sample.allocation_id else None
        key = (sample.namespace, sample.workload or sample.pod)
        if worker is not None:
            key = (worker.spec.namespace, worker.spec.workload or worker.spec.pod)
        elif not self.view.workload_workers(key):
            return self._drop("unknown_workload", sample)
        merger = self.mergers.get(key)
        if merger is None:
            merger = self.mergers[key] = SampleMerger()
        taken, done = merger.add(sample.allocation_id or sample.pod, milli_tflops=sample.milli_tflops_used,
                                 vram_bytes=sample.vram_bytes_used, at=sample.at)
        if not taken:
            return self._drop("out_of_order", sample)
        if done is not None:
            self._feed(key, done)
        self.touched.add(key)
        return None

    def flush(self, key: WorkloadKey) -> None:
        """Feed the workload's pending merged samples into its histograms (start of a round)."""
        merger = self.mergers.get(key)
        for done in merger.flush() if merger is not None else []:
            self._feed(key, done)

    def _feed(self, key: WorkloadKey, merged: MergedSample) -> None:
        agg = self.aggregators.get(key) or self._aggregator(key)
        if not agg.add_sample(merged.worker, milli_tflops=merged.milli_tflops, vram_bytes=merged.vram_bytes,
                              at=merged.at):
            self.dropped["out_of_order"] += 1

    def _drop(self, reason: str, sample: UsageSample) -> str:
        self.dropped[reason] += 1
        log.warning("usage sample dropped", reason=reason, workload=sample.workload, namespace=sample.namespace,
                    pod=sample.pod, allocation_id=sample.allocation_id)
        return reason

    def _aggregator(self, key: WorkloadKey) -> WorkloadAggregator:
        """The workload's aggregator; replaced (history lost, as upstream) when the half-life changes."""
        try:
            half = cfg.half_life(cfg.percentile_config(self.config_of(key).auto_set_resources))
        except cfg.ConfigError:
            half = cfg.half_life(cfg.PercentileConfig())
        agg = self.aggregators.get(key)
        if agg is None or agg.half_life != half:
            agg = WorkloadAggregator(half_life=half, tensorfusion_vram_timing=self.tensorfusion_vram_timing)
            self.aggregators[key] = agg
        return agg

    def due(self, now: datetime) -> list[WorkloadKey]:
        """Workloads whose interval has passed since their last round (TensorFusion autoscaler.go)."""
        result = []
        for key in self.view.workloads():
            state = self.states.get(key)
            interval = self._interval(key)
            if state is None or state.evaluated_at is None or now - state.evaluated_at >= interval:
                result.append(key)
        return result

    def _interval(self, key: WorkloadKey) -> timedelta:
        try:
            return cfg.percentile_config(self.config_of(key).auto_set_resources).interval or self.interval
        except cfg.ConfigError:
            return self.interval

    def current_of(self, key: WorkloadKey) -> RequestLimit:
        """The workload's current resources: the last recommendation, else the spec (TensorFusion)."""
        state, workers = self.states.get(key), self.view.workload_workers(key)
        if state is not None and state.recommendation is not None:
            return state.recommendation
        return workers[0].original if workers else RequestLimit()

    def external_scaler(self, key: WorkloadKey, *, now: datetime) -> cfg.ExternalScaler | None:
        """The workload's external scaler when it should be asked this round (enabled, old enough)."""
        try:
            config = self.config_of(key)
        except cfg.ConfigError:
            return None
        scaler = config.external_scaler
        if not cfg.is_active(config) or scaler is None or not scaler.enable or not scaler.url:
            return None
        return None if self._young_for(key, scaler, now) else scaler

    def _young_for(self, key: WorkloadKey, scaler: cfg.ExternalScaler, now: datetime) -> bool:
        delay = cfg.parse_duration(scaler.initial_delay_period) if scaler.initial_delay_period else None
        workers = self.view.workload_workers(key)
        started = min((w.granted_at for w in workers), default=now)
        return now - started < (delay if delay is not None else cfg.PercentileConfig().initial_delay)

    def evaluate(self, key: WorkloadKey, *, now: datetime,
                 answer: external.ExternalAnswer | external.ExternalError | None = None
                 ) -> list[intents.ResizeAllocation]:
        """One round for ``key``: recommend, merge, remember, and resize the workers that differ.

        ``answer`` is the external scaler's reply fetched by the service this round (an
        ExternalError abandons the round, as upstream).
        """
        state = self.states.setdefault(key, WorkloadState())
        state.evaluated_at = now
        self.touched.add(key)
        self.flush(key)
        workers = self.view.workload_workers(key)
        try:
            config = self.config_of(key)
        except cfg.ConfigError as exc:
            state.reason, state.message = "InvalidConfig", str(exc)
            return []
        if not workers or not cfg.is_active(config):
            return []
        try:
            merged = self._recommend(key, state, config, workers, now, answer)
        except (cron.CronError, external.ExternalError) as exc:
            reason = "CronError" if isinstance(exc, cron.CronError) else "ExternalError"
            state.reason, state.message = reason, str(exc)
            log.warning("autoscaling round abandoned", namespace=key[0], workload=key[1], error=str(exc))
            return []
        if merged is not None:
            state.recommendation = merged
        if not cfg.is_enabled(config) or state.recommendation is None:
            return []
        return self._apply(state.recommendation, config, workers, now)

    def _recommend(self, key: WorkloadKey, state: WorkloadState, config: cfg.AutoScalingConfig,
                   workers: list[Worker], now: datetime,
                   answer: external.ExternalAnswer | external.ExternalError | None) -> RequestLimit | None:
        pconf = cfg.percentile_config(config.auto_set_resources)
        original = workers[0].original
        current = state.recommendation or original
        processor = functools.partial(cap_to_headroom, current=current, max_allowed=self.view.max_allowed(key))
        outcomes: list[Outcome] = []
        percentile = recommender.recommend(
            self._aggregator(key), config=pconf, qos=workers[0].spec.qos, current=current, original=original,
            processor=processor, started_at=min(w.granted_at for w in workers), now=now)
        outcomes.extend([percentile] if percentile else [])
        timed, state.active_cron = cron.recommend(
            config.cron_scaling_rules, previous=state.active_cron, original=original, current=current,
            processor=processor, now=now, default_tz=self.default_tz)
        outcomes.extend([timed] if timed else [])
        scaler = config.external_scaler
        if scaler is not None and scaler.enable and self._young_for(key, scaler, now):
            outcomes.append(Outcome(resources=RequestLimit(), has_applied=True, reason="LowConfidence",
                                    message="workload younger than the external scaler's initialDelayPeriod"))
        elif isinstance(answer, external.ExternalError):
            raise answer
        elif answer is not None:
            asked = external.outcome(answer, current=current, processor=processor)
            outcomes.extend([asked] if asked else [])
        for outcome in outcomes:
            if outcome.reason:
                state.reason, state.message = outcome.reason, outcome.message
        return merge(outcomes, current=current)

    def _apply(self, rec: RequestLimit, config: cfg.AutoScalingConfig, workers: list[Worker],
               now: datetime) -> list[intents.ResizeAllocation]:
        compute, vram = cfg.should_scale(config, "compute"), cfg.should_scale(config, "vram")
        result = []
        for worker in workers:
            if worker.spec.attributes.get(cfg.DEDICATED_GPU_ANNOTATION, "").lower() == "true":
                continue
            target = worker_target(rec, worker, compute=compute, vram=vram)
            if not self._within_bounds(worker, target):
                continue
            intent = self.tracker.apply(worker, target, now=now)
            if intent is not None:
                result.append(intent)
        return result

    def _within_bounds(self, worker: Worker, target: RequestLimit) -> bool:
        """Refuse (log and count) a target the allocator would reject as beyond the contract's bounds."""
        for side, res in (("request", target.request), ("limit", target.limit)):
            try:
                guard.check_message(res)
            except BoundsError as exc:
                self.dropped["resize_out_of_bounds"] += 1
                log.warning("resize refused", allocation_id=worker.spec.allocation_id, field=f"{side}.{exc.field}",
                            error=str(exc))
                return False
        return True

    def on_event(self, event: decisions.AnyEvent, *, now: datetime) -> list[intents.ResizeAllocation]:
        """Fold an allocator event; a ResizeRejected may yield one capped retry."""
        self.view.apply(event)
        if isinstance(event, decisions.AllocationResized):
            self.tracker.on_resized(event)
        elif isinstance(event, decisions.ResizeRejected):
            worker = self.view.workers.get(event.allocation_id)
            headroom = self.view.max_allowed((worker.spec.namespace, worker.spec.workload or worker.spec.pod)) \
                if worker else None
            retry = self.tracker.on_rejected(event, worker=worker, headroom=headroom, now=now)
            log.info("resize rejected", allocation_id=event.allocation_id, reason=event.reason,
                     retry=retry is not None)
            return [retry] if retry else []
        elif isinstance(event, decisions.AllocationReleased | decisions.AllocationPreempted):
            self.tracker.attempts.pop(event.allocation_id, None)
        elif isinstance(event, decisions.IntentRejected):
            self.tracker.on_intent_rejected(event, now=now)
        return []
