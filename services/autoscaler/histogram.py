"""The decaying exponential-bucket histogram behind every percentile estimate.

A faithful port of the Kubernetes VPA recommender histogram (``k8s.io/autoscaler/vertical-pod-
autoscaler v1.6.0``, ``pkg/recommender/util/histogram.go``, ``decaying_histogram.go``,
``histogram_options.go``) as TensorFusion uses it (``internal/autoscaler/metrics``): buckets
grow by 5 %, weights decay with a half-life, percentiles return a bucket's upper edge.
Float arithmetic follows the Go code step by step so that percentiles match it exactly.
Pure: no clock; every call takes the sample time.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import msgspec

ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)
"""Go's zero ``time.Time``: the first reference timestamp, and the origin of rounding."""

MAX_DECAY_EXPONENT = 100
"""VPA maxDecayExponent: the reference moves once a sample is 100 half-lives past it."""

_MICRO = timedelta(microseconds=1)


def to_micros(at: datetime) -> int:
    """Microseconds since Go's zero time (0001-01-01 UTC); ``at`` must be timezone-aware."""
    return (at - ZERO_TIME) // _MICRO


class HistogramOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Exponential bucket layout: ``start(n) = first × (ratio^n − 1)/(ratio − 1)``.

    ``max_value`` and ``first_bucket`` in the histogram's unit (TFLOPS or bytes); ``epsilon`` is
    the smallest weight a bucket needs to count as non-empty (VPA: 0.001 × 0.1).
    """

    max_value: float
    first_bucket: float
    ratio: float = 1.05
    epsilon: float = 1e-4

    @property
    def num_buckets(self) -> int:
        """``ceil(log_r(max × (r − 1)/first + 1)) + 1`` (176 for both TensorFusion histograms)."""
        size = math.log(self.max_value * (self.ratio - 1) / self.first_bucket + 1) / math.log(self.ratio)
        return math.ceil(size) + 1

    def find_bucket(self, value: float) -> int:
        """The bucket holding ``value``: 0 below the first bucket, capped at the last bucket."""
        if value < self.first_bucket:
            return 0
        bucket = int(math.log(value * (self.ratio - 1) / self.first_bucket + 1) / math.log(self.ratio))
        return min(bucket, self.num_buckets - 1)

    def bucket_start(self, bucket: int) -> float:
        """Lower edge of ``bucket`` (0 for bucket 0)."""
        if bucket == 0:
            return 0.0
        return self.first_bucket * (math.pow(self.ratio, float(bucket)) - 1) / (self.ratio - 1)


TFLOPS_OPTIONS = HistogramOptions(max_value=10_000.0, first_bucket=0.1)
"""TFLOPS histogram: values in TFLOPS, first bucket 0.1, up to 10 000 (TensorFusion)."""

VRAM_OPTIONS = HistogramOptions(max_value=1e12, first_bucket=1e7)
"""VRAM histogram: values in bytes, first bucket 1e7 B, up to 1e12 B (TensorFusion)."""


class HistogramCheckpoint(msgspec.Struct, frozen=True, kw_only=True):
    """Lossless saved form: non-zero bucket weights, total, bounds and the decay reference (µs)."""

    weights: dict[int, float]
    total: float
    min_bucket: int
    max_bucket: int
    reference_us: int
    half_life_us: int


class DecayingHistogram:
    """A histogram whose sample weights double every ``half_life`` of sample time.

    Stored weight of a sample = ``w × 2^((t − ref)/half_life)``; ``ref`` moves forward (rounded to
    a multiple of the half-life since Go's zero time) when a sample lands 100 half-lives past it.
    """

    __slots__ = ("_bucket", "_max", "_min", "_ref", "_total", "half_life_us", "options")

    def __init__(self, options: HistogramOptions, *, half_life: timedelta) -> None:
        self.options = options
        self.half_life_us = half_life // _MICRO
        if self.half_life_us <= 0:
            raise ValueError(f"half_life must be positive, got {half_life}")
        self._bucket = [0.0] * options.num_buckets
        self._total = 0.0
        self._min = options.num_buckets - 1
        self._max = 0
        self._ref = 0

    def add(self, value: float, weight: float, at: datetime) -> None:
        """Add ``value`` with base ``weight`` (>= 0) observed at ``at``."""
        self._add_raw(value, weight * self._decay_factor(to_micros(at)))

    def subtract(self, value: float, weight: float, at: datetime) -> None:
        """Remove ``value`` with base ``weight`` as of ``at``; totals below epsilon become 0."""
        bucket = self.options.find_bucket(value)
        raw = weight * self._decay_factor(to_micros(at))
        self._total = self._safe_subtract(self._total, raw)
        self._bucket[bucket] = self._safe_subtract(self._bucket[bucket], raw)
        self._update_bounds()

    def is_empty(self) -> bool:
        """True when no bucket holds at least epsilon."""
        return self._bucket[self._min] < self.options.epsilon

    def percentile(self, p: float) -> float:
        """Upper edge of the first bucket where the running weight reaches ``p × total`` (0 if empty)."""
        if self.is_empty():
            return 0.0
        partial, threshold = 0.0, p * self._total
        bucket = self._min
        while bucket < self._max:
            partial += self._bucket[bucket]
            if partial >= threshold:
                break
            bucket += 1
        if bucket < self.options.num_buckets - 1:
            return self.options.bucket_start(bucket + 1)
        return self.options.bucket_start(bucket)

    def checkpoint(self) -> HistogramCheckpoint:
        """The whole state as a value (for the NATS KV checkpoint)."""
        weights = {i: w for i, w in enumerate(self._bucket) if w != 0.0}
        return HistogramCheckpoint(weights=weights, total=self._total, min_bucket=self._min,
                                   max_bucket=self._max, reference_us=self._ref, half_life_us=self.half_life_us)

    @classmethod
    def restore(cls, options: HistogramOptions, saved: HistogramCheckpoint) -> DecayingHistogram:
        """Rebuild a histogram from :meth:`checkpoint`; raises ValueError on a bucket out of range."""
        hist = cls(options, half_life=saved.half_life_us * _MICRO)
        for index, weight in saved.weights.items():
            if not 0 <= index < options.num_buckets:
                raise ValueError(f"checkpoint bucket {index} outside 0..{options.num_buckets - 1}")
            hist._bucket[index] = weight
        hist._total, hist._ref = saved.total, saved.reference_us
        hist._min, hist._max = saved.min_bucket, saved.max_bucket
        return hist

    def _add_raw(self, value: float, weight: float) -> None:
        bucket = self.options.find_bucket(value)
        self._bucket[bucket] += weight
        self._total += weight
        if bucket < self._min and self._bucket[bucket] >= self.options.epsilon:
            self._min = bucket
        if bucket > self._max and self._bucket[bucket] >= self.options.epsilon:
            self._max = bucket

    def _safe_subtract(self, value: float, sub: float) -> float:
        value -= sub
        return 0.0 if value < self.options.epsilon else value

    def _decay_factor(self, at_us: int) -> float:
        if at_us > self._ref + self.half_life_us * MAX_DECAY_EXPONENT:
            self._shift_reference(at_us)
        return _exp2((at_us - self._ref) / self.half_life_us)

    def _shift_reference(self, at_us: int) -> None:
        half = self.half_life_us
        new_ref = (at_us + half // 2) // half * half  # Go Time.Round: nearest multiple, halves up
        exponent = math.floor((self._ref - new_ref) / half + 0.5)  # VPA round()
        self._scale(math.ldexp(1.0, exponent))
        self._ref = new_ref

    def _scale(self, factor: float) -> None:
        for bucket in range(self._min, self._max + 1):
            self._bucket[bucket] *= factor
        self._total *= factor
        self._update_bounds()

    def _update_bounds(self) -> None:
        last, eps = self.options.num_buckets - 1, self.options.epsilon
        while self._bucket[self._min] < eps and self._min < last:
            self._min += 1
        while self._bucket[self._max] < eps and self._max > 0:
            self._max -= 1


def _exp2(exponent: float) -> float:
    """Go math.Exp2: underflows to 0.0 and overflows to +Inf instead of raising."""
    try:
        return math.pow(2.0, exponent)
    except OverflowError:
        return math.inf
