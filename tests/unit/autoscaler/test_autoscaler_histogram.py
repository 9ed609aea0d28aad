"""The VPA exponential decaying histogram (VPA's, as TensorFusion uses it): layout, percentiles, decay, checkpoints."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from services.autoscaler.histogram import TFLOPS_OPTIONS, VRAM_OPTIONS, DecayingHistogram, HistogramCheckpoint

T0 = datetime(2026, 3, 5, tzinfo=UTC)
HOUR = timedelta(hours=1)


def test_both_histograms_have_176_buckets() -> None:
    assert TFLOPS_OPTIONS.num_buckets == 176
    assert VRAM_OPTIONS.num_buckets == 176


def test_bucket_edges_follow_two_times_ratio_power() -> None:
    assert TFLOPS_OPTIONS.bucket_start(0) == 0.0
    assert abs(TFLOPS_OPTIONS.bucket_start(81) - 2 * (1.05**81 - 1)) < 1e-9
    assert abs(VRAM_OPTIONS.bucket_start(10) - 2e8 * (1.05**10 - 1)) < 1e-3


def test_find_bucket_is_zero_below_first_and_capped_at_last() -> None:
    assert TFLOPS_OPTIONS.find_bucket(0.05) == 0
    assert TFLOPS_OPTIONS.find_bucket(100.0) == 80
    assert TFLOPS_OPTIONS.find_bucket(1e9) == 175


def test_empty_histogram_has_zero_percentile() -> None:
    hist = DecayingHistogram(TFLOPS_OPTIONS, half_life=HOUR)
    assert hist.is_empty()
    assert hist.percentile(0.5) == 0.0


def test_percentile_is_upper_edge_of_bucket() -> None:
    hist = DecayingHistogram(TFLOPS_OPTIONS, half_life=HOUR)
    hist.add(100.0, 0.1, T0)
    assert hist.percentile(0.99) == TFLOPS_OPTIONS.bucket_start(81)


def test_last_bucket_returns_its_start() -> None:
    hist = DecayingHistogram(TFLOPS_OPTIONS, half_life=HOUR)
    hist.add(1e9, 1.0, T0)
    assert hist.percentile(1.0) == TFLOPS_OPTIONS.bucket_start(175)


def test_newer_samples_outweigh_older_ones_by_half_life() -> None:
    hist = DecayingHistogram(TFLOPS_OPTIONS, half_life=HOUR)
    hist.add(10.0, 1.0, T0)
    hist.add(50.0, 1.0, T0 + 2 * HOUR)  # weight 4x the first
    assert hist.percentile(0.5) == TFLOPS_OPTIONS.bucket_start(TFLOPS_OPTIONS.find_bucket(50.0) + 1)
    assert hist.percentile(0.1) == TFLOPS_OPTIONS.bucket_start(TFLOPS_OPTIONS.find_bucket(10.0) + 1)


def test_reference_shift_keeps_relative_weights() -> None:
    hist = DecayingHistogram(TFLOPS_OPTIONS, half_life=HOUR)
    hist.add(10.0, 1.0, T0)
    hist.add(50.0, 1.0, T0 + 150 * HOUR)  # forces a reference shift; the old sample decays to ~0
    assert hist.percentile(0.01) == TFLOPS_OPTIONS.bucket_start(TFLOPS_OPTIONS.find_bucket(50.0) + 1)


def test_subtract_below_epsilon_empties_the_histogram() -> None:
    hist = DecayingHistogram(VRAM_OPTIONS, half_life=HOUR)
    hist.add(4e9, 1.0, T0)
    hist.subtract(4e9, 1.0, T0)
    assert hist.is_empty()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 5000), st.integers(0, 600)), min_size=1, max_size=40))
def test_checkpoint_round_trip_preserves_every_percentile(samples: list[tuple[float, int]]) -> None:
    hist = DecayingHistogram(TFLOPS_OPTIONS, half_life=HOUR)
    for value, minute in sorted(samples, key=lambda s: s[1]):
        hist.add(value, 0.1, T0 + timedelta(minutes=minute))
    saved = hist.checkpoint()
    import msgspec

    restored = DecayingHistogram.restore(TFLOPS_OPTIONS, msgspec.msgpack.decode(
        msgspec.msgpack.encode(saved), type=HistogramCheckpoint))
    for p in (0.0, 0.5, 0.9, 0.95, 0.99, 1.0):
        assert restored.percentile(p) == hist.percentile(p)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 9000), min_size=1, max_size=60), st.floats(0.01, 1.0))
def test_percentile_is_monotonic_and_bounds_the_data(values: list[float], p: float) -> None:
    hist = DecayingHistogram(TFLOPS_OPTIONS, half_life=HOUR)
    for i, value in enumerate(values):
        hist.add(value, 0.1, T0 + timedelta(minutes=i))
    assert hist.percentile(p) <= hist.percentile(1.0)
    assert hist.percentile(1.0) >= max(values) or hist.percentile(1.0) == TFLOPS_OPTIONS.bucket_start(175)
    assert hist.percentile(1.0) <= max(max(values) * 1.05 + 0.1, TFLOPS_OPTIONS.bucket_start(1))
