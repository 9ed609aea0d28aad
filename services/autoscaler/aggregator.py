"""Per-workload usage aggregation: the two decaying histograms fed by per-worker samplers.

TensorFusion ``internal/autoscaler/metrics/metrics_aggregator.go`` and ``metrics_sampler.go``: TFLOPS
samples go in with weight 0.1 each; VRAM goes in as one peak per worker per 24 h window with
weight 1, replacing the window's previous peak. Workers are keyed by allocation id (the pod UID),
which fixes the upstream UID-versus-pod-name mismatch.

The VRAM peak timing is a deliberate choice (an upstream quirk): by default gpuledger adds the new
peak at the window end, as VPA does, so one worker's new peak cannot wipe out another worker's;
``tensorfusion_vram_timing=True`` reproduces TensorFusion (add at the sample time) bit for bit.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import msgspec

from services.autoscaler.histogram import (
    TFLOPS_OPTIONS,
    VRAM_OPTIONS,
    DecayingHistogram,
    HistogramCheckpoint,
)

TFLOPS_SAMPLE_WEIGHT = 0.1
"""Base weight of one TFLOPS sample (TensorFusion)."""

VRAM_PEAK_WINDOW = timedelta(hours=24)
"""One VRAM peak per worker per this window (TensorFusion / VPA memory aggregation interval)."""

DEFAULT_HALF_LIFE = timedelta(hours=1)
"""Half-life for the default 2 h ``historyDataPeriod`` (half-life = period / 2)."""


class WorkerSampler(msgspec.Struct, kw_only=True):
    """One worker's ordering guards and its current VRAM peak window (times are UTC datetimes)."""

    last_tflops_at: datetime | None = None
    last_vram_at: datetime | None = None
    vram_peak: int = 0
    vram_window_end: datetime | None = None


class AggregatorCheckpoint(msgspec.Struct, frozen=True, kw_only=True):
    """Saved form of a :class:`WorkloadAggregator` (stored in the NATS KV bucket)."""

    tflops: HistogramCheckpoint
    vram: HistogramCheckpoint
    samplers: dict[str, WorkerSampler]
    sample_count: int
    first_sample_at: datetime | None
    last_sample_at: datetime | None
    tensorfusion_vram_timing: bool = False


class WorkloadAggregator:
    """Both histograms of one workload, the sample count and the first/last sample times.

    ``half_life`` is ``historyDataPeriod / 2`` (default 1 h). Histogram values: TFLOPS as float
    TFLOPS, VRAM as bytes.
    """

    def __init__(self, *, half_life: timedelta = DEFAULT_HALF_LIFE, tensorfusion_vram_timing: bool = False) -> None:
        self.tflops = DecayingHistogram(TFLOPS_OPTIONS, half_life=half_life)
        self.vram = DecayingHistogram(VRAM_OPTIONS, half_life=half_life)
        self.samplers: dict[str, WorkerSampler] = {}
        self.sample_count = 0
        self.first_sample_at: datetime | None = None
        self.last_sample_at: datetime | None = None
        self.tensorfusion_vram_timing = tensorfusion_vram_timing

    @property
    def half_life(self) -> timedelta:
        """The histograms' half-life."""
        return timedelta(microseconds=self.tflops.half_life_us)

    def is_empty(self) -> bool:
        """True when both histograms are empty (no estimate possible)."""
        return self.tflops.is_empty() and self.vram.is_empty()

    def add_sample(self, worker: str, *, milli_tflops: int, vram_bytes: int, at: datetime) -> bool:
        """Feed one sample of ``worker``; returns False when both parts were out of order.

        ``milli_tflops`` milli-TFLOPS and ``vram_bytes`` bytes, both >= 0 (ValueError otherwise).
        """
        if milli_tflops < 0 or vram_bytes < 0:
            raise ValueError(f"negative usage: milli_tflops={milli_tflops}, vram_bytes={vram_bytes}")
        sampler = self.samplers.setdefault(worker, WorkerSampler())
        took_tflops = self._add_tflops(sampler, milli_tflops / 1000, at)
        took_vram = self._add_vram(sampler, vram_bytes, at)
        return took_tflops or took_vram

    def forget_worker(self, worker: str) -> None:
        """Drop a worker's sampler (the worker is gone); its peaks stay in the histogram to decay."""
        self.samplers.pop(worker, None)

    def _add_tflops(self, sampler: WorkerSampler, tflops: float, at: datetime) -> bool:
        if sampler.last_tflops_at is not None and at < sampler.last_tflops_at:
            return False
        sampler.last_tflops_at = at
        self.tflops.add(tflops, TFLOPS_SAMPLE_WEIGHT, at)
        self.sample_count += 1
        if self.first_sample_at is None or at < self.first_sample_at:
            self.first_sample_at = at
        if self.last_sample_at is None or at > self.last_sample_at:
            self.last_sample_at = at
        return True

    def _add_vram(self, sampler: WorkerSampler, vram: int, at: datetime) -> bool:
        if sampler.last_vram_at is not None and at < sampler.last_vram_at:
            return False
        sampler.last_vram_at = at
        if sampler.vram_window_end is None:
            sampler.vram_window_end = at
        window_end = sampler.vram_window_end
        if at < window_end:
            if vram > sampler.vram_peak:
                self.vram.subtract(float(sampler.vram_peak), 1.0, window_end)
                self.vram.add(float(vram), 1.0, at if self.tensorfusion_vram_timing else window_end)
                sampler.vram_peak = vram
            return True
        windows = (at - window_end) // VRAM_PEAK_WINDOW
        sampler.vram_window_end = window_end + windows * VRAM_PEAK_WINDOW + VRAM_PEAK_WINDOW
        add_at = at if self.tensorfusion_vram_timing else sampler.vram_window_end
        self.vram.add(float(vram), 1.0, add_at)
        sampler.vram_peak = vram
        return True

    def checkpoint(self) -> AggregatorCheckpoint:
        """The aggregator as a value (histograms lossless)."""
        return AggregatorCheckpoint(
            tflops=self.tflops.checkpoint(), vram=self.vram.checkpoint(),
            samplers={k: msgspec.structs.replace(v) for k, v in self.samplers.items()},
            sample_count=self.sample_count, first_sample_at=self.first_sample_at,
            last_sample_at=self.last_sample_at, tensorfusion_vram_timing=self.tensorfusion_vram_timing,
        )

    @classmethod
    def restore(cls, saved: AggregatorCheckpoint) -> WorkloadAggregator:
        """Rebuild from :meth:`checkpoint`; raises ValueError on a corrupt histogram."""
        agg = cls(half_life=timedelta(microseconds=saved.tflops.half_life_us),
                  tensorfusion_vram_timing=saved.tensorfusion_vram_timing)
        agg.tflops = DecayingHistogram.restore(TFLOPS_OPTIONS, saved.tflops)
        agg.vram = DecayingHistogram.restore(VRAM_OPTIONS, saved.vram)
        agg.samplers = dict(saved.samplers)
        agg.sample_count = saved.sample_count
        agg.first_sample_at, agg.last_sample_at = saved.first_sample_at, saved.last_sample_at
        return agg
