"""Autoscaler cases A1-A25, A32, A33 as table tests.

(A26-A31 and A38 run through the engine in test_autoscaler_engine_cases.py; A34-A37, the allocator side
of AdjustAllocation, in test_autoscaler_allocator_resize_cases.py.)
"""

from __future__ import annotations

import functools
from datetime import timedelta

import pytest

from events.values import Resources
from services.autoscaler import config as cfg
from services.autoscaler import recommender
from services.autoscaler.aggregator import WorkloadAggregator
from services.autoscaler.histogram import ZERO_TIME
from services.autoscaler.recommendation import Outcome, RequestLimit, cap_to_headroom, merge
from services.autoscaler.view import LedgerView
from tests.unit.autoscaler.builders import GI, T0, estimates, fed, gpu, granted, node, raw, res, rl, spec

DEFAULT = cfg.PercentileConfig()


def run(est, *, current, original=None, qos="", processor=None):  # type: ignore[no-untyped-def]
    return recommender.from_estimates(est, config=DEFAULT, qos=qos, current=current, original=original or current,
                                      processor=processor)


# --- A1-A3: configuration --------------------------------------------------------------------------

def test_a1_defaults_are_the_code_constants() -> None:
    c = cfg.percentile_config(None)
    assert (c.target_compute, c.lower_compute, c.upper_compute) == (0.95, 0.5, 0.99)
    assert (c.target_vram, c.lower_vram, c.upper_vram) == (0.98, 0.5, 0.99)
    assert (c.margin_fraction, c.update_threshold) == (0.15, 0.1)
    assert (c.min_vram_ratio, c.max_vram_ratio, c.min_compute_ratio, c.max_compute_ratio) == (0.2, 5.0, 0.1, 10.0)
    assert (c.history_period, c.initial_delay) == (timedelta(hours=2), timedelta(minutes=30))


def test_a2_float_fields_parse() -> None:
    auto = cfg.parse_config({"autoSetResources": {
        "targetComputePercentile": "0.8", "lowerBoundComputePercentile": "0.1", "upperBoundComputePercentile": "0.95",
        "targetVRAMPercentile": "0.7", "lowerBoundVRAMPercentile": "0.2", "upperBoundVRAMPercentile": "0.9",
        "marginFraction": "0.15"}}).auto_set_resources
    c = cfg.percentile_config(auto)
    assert (c.target_compute, c.lower_compute, c.upper_compute) == (0.8, 0.1, 0.95)
    assert (c.target_vram, c.lower_vram, c.upper_vram, c.margin_fraction) == (0.7, 0.2, 0.9, 0.15)


def test_a3_invalid_float_fields_keep_defaults() -> None:
    auto = cfg.AutoSetResources(target_compute_percentile="not-a-float", lower_bound_compute_percentile="",
                                upper_bound_compute_percentile="0.99")
    c = cfg.percentile_config(auto)
    assert (c.target_compute, c.lower_compute, c.upper_compute) == (0.95, 0.5, 0.99)


def test_history_period_sets_half_life_and_bad_durations_fall_back() -> None:
    assert cfg.half_life(cfg.percentile_config(cfg.AutoSetResources(history_data_period="6h"))) == timedelta(hours=3)
    c = cfg.percentile_config(cfg.AutoSetResources(history_data_period="soon", initial_delay_period="1h30m"))
    assert (c.history_period, c.initial_delay) == (timedelta(hours=2), timedelta(minutes=90))


# --- A4-A9: the percentile recommender from given estimates ------------------------------------------

PERCENTILE_CASES = [
    # case, estimates, qos, current=original, expected, applied
    ("A4", (100, 200, 300), "", rl((20, 20), (40, 40)), rl((100, 100), (300, 200)), False),
    ("A5", (100, 200, 300), "", rl((400, 400), (800, 800)), rl((100, 100), (800, 300)), False),
    ("A8 high", (100, 200, 300), "high", rl((20, 20), (40, 40)), rl((200, 100), (300, 200)), False),
    ("A8 critical", (100, 200, 300), "critical", rl((20, 20), (40, 40)), rl((200, 100), (300, 200)), False),
    ("A8 critical big", (100, 200, 300), "critical", rl((400, 400), (800, 800)), rl((300, 300), (800, 300)), False),
]


@pytest.mark.parametrize(("case", "est", "qos", "current", "expected", "applied"), PERCENTILE_CASES,
                         ids=[c[0] for c in PERCENTILE_CASES])
def test_percentile_recommendation(case: str, est: tuple[int, int, int], qos: str, current: RequestLimit,
                                   expected: RequestLimit, applied: bool) -> None:
    out = run(estimates(*est), current=current, qos=qos)
    assert out is not None
    assert out.resources == expected
    assert out.has_applied is applied
    assert "Compute scaled" in out.message and "VRAM scaled" in out.message


def test_a6_within_bounds_is_inside_threshold() -> None:
    current = rl((100, 100), (300, 300))
    out = run(estimates(100, 200, 300), current=current)
    assert out is not None and out.has_applied and out.reason == "InsideUpdateThreshold"
    assert out.resources == current
    assert merge([out], current=current) is None


def test_a7_processor_output_is_the_result() -> None:
    def processor(rec: RequestLimit) -> tuple[RequestLimit, str]:
        return rl((100, 100), (200, 200)), "fake message"

    out = run(estimates(100, 200, 300), current=rl((20, 20), (40, 40)), processor=processor)
    assert out is not None and out.resources == rl((100, 100), (200, 200)) and not out.has_applied
    assert "Compute scaled" in out.message and "VRAM scaled" in out.message and "fake message" in out.message


def test_a9_threshold_holds_small_change_and_moves_both_on_large_one() -> None:
    current = rl((100, 100), (300, 300))
    small = recommender.Estimates(lower=res(105, 100), target=res(200, 200), upper=res(300, 300))
    out = run(small, current=current)
    assert out is not None and out.has_applied and out.reason == "InsideUpdateThreshold"
    large = recommender.Estimates(lower=res(105, 150), target=res(200, 200), upper=res(300, 300))
    out = run(large, current=current)
    assert out is not None and not out.has_applied
    assert out.resources == rl((105, 150), (300, 300))


# --- A10-A13: merge and the headroom processor -------------------------------------------------------

def test_a10_merge_takes_larger_request_with_its_limit() -> None:
    one = Outcome(resources=rl((10, 10), (15, 15)), has_applied=False)
    two = Outcome(resources=rl((5, 15), (20, 20)), has_applied=False)
    assert merge([one, two], current=rl((1, 1), (1, 1))) == rl((10, 15), (15, 20))


def test_a11_proposal_below_a_locking_floor_is_dropped() -> None:
    floor = Outcome(resources=rl((50, 50), (50, 50)), has_applied=True, scale_down_locking=True)
    lower = Outcome(resources=rl((10, 10), (10, 10)), has_applied=False)
    assert merge([floor, lower], current=rl((1, 1), (1, 1))) is None


def test_merge_zero_fills_from_current() -> None:
    only_tflops = Outcome(resources=RequestLimit(request=res(5, 0), limit=res(6, 0)), has_applied=False)
    assert merge([only_tflops], current=rl((1, 2), (3, 4))) == rl((5, 2), (6, 4))


def test_a12_requests_capped_to_max_allowed_limits_untouched() -> None:
    rec, message = cap_to_headroom(rl((200, 200), (400, 400)), current=rl((50, 50), (100, 100)),
                                   max_allowed=res(100, 100))
    assert rec == rl((100, 100), (400, 400))
    assert message == "TFlops request set to max allowed: (100), VRAM request set to max allowed: (100Gi)"


def test_a13_recommendation_within_max_is_unchanged() -> None:
    rec, message = cap_to_headroom(rl((200, 200), (400, 400)), current=rl((50, 50), (100, 100)),
                                   max_allowed=res(300, 300))
    assert rec == rl((200, 200), (400, 400)) and message == ""


# --- A18-A25: samplers, aggregator and estimates -----------------------------------------------------

def test_a18_vram_peak_tracks_the_window_maximum() -> None:
    agg = WorkloadAggregator()
    peaks = []
    for minute, vram in enumerate((0, 10, 5)):
        agg.add_sample("w", milli_tflops=0, vram_bytes=vram, at=T0 + timedelta(minutes=minute))
        peaks.append(agg.samplers["w"].vram_peak)
    assert peaks == [0, 10, 10]


def test_a19_zero_tflops_sample_at_zero_time_is_not_empty() -> None:
    agg = WorkloadAggregator()
    assert agg.is_empty()
    agg.add_sample("w", milli_tflops=0, vram_bytes=0, at=ZERO_TIME)
    assert not agg.tflops.is_empty()


def _est(agg: WorkloadAggregator) -> recommender.Estimates:
    est = recommender.estimate(agg, DEFAULT)
    assert est is not None
    return est


def _triple(est: recommender.Estimates, field: str) -> tuple[int, int, int]:
    scale = 1000 if field == "milli_tflops" else 1
    return tuple(getattr(getattr(est, b), field) // scale for b in ("lower", "target", "upper"))  # type: ignore[return-value]


SERIES = {
    "A20": [("w", 100, 1e9, 60 * i) for i in range(120)],
    "A21": [("w", i + 1, 4 * GI, 60 * i) for i in range(100)],
    "A22": [s for i in range(60) for s in (("w0", 10, 2 * GI, 60 * i), ("w1", 30, 6 * GI, 60 * i))],
    "A23": [("w0", 5, 8 * GI, 0), ("w1", 5, 2 * GI, 0), ("w1", 5, 4 * GI, 60)],
    "A24": [("w", 0, 0, 60 * i) for i in range(10)],
    "A25": [("w", 10, GI, 60 * i) for i in range(60)] + [("w", 50, GI, 60 * (i + 179)) for i in range(60)],
}
ESTIMATE_CASES = [
    ("A20", True, (117, 117, 117), (1_168_723_596,) * 3),
    ("A21", True, (74, 111, 117), (4_992_073_455,) * 3),
    ("A22", True, (11, 34, 34), (2_539_377_048, 7_485_380_855, 7_485_380_855)),
    ("A23", True, (5, 5, 5), (4_992_073_455,) * 3),
    ("A23", False, (5, 5, 5), (4_992_073_455, 10_109_348_249, 10_109_348_249)),
    ("A24", True, (0, 0, 0), (11_500_000,) * 3),
    ("A25", True, (58, 58, 58), (1_238_659_776,) * 3),
]


@pytest.mark.parametrize(("case", "tensorfusion", "tflops", "vram"), ESTIMATE_CASES,
                         ids=[f"{c[0]}-{'tf' if c[1] else 'vpa'}" for c in ESTIMATE_CASES])
def test_estimates_match_the_reference(case: str, tensorfusion: bool, tflops: tuple[int, ...],
                                       vram: tuple[int, ...]) -> None:
    est = _est(fed(SERIES[case], tensorfusion=tensorfusion))
    assert _triple(est, "milli_tflops") == tflops
    assert _triple(est, "vram_bytes") == vram


def test_a23_gpuledger_default_keeps_the_other_workers_8gi_peak() -> None:
    """The VPA timing (our default) puts p99 on the 8 GiB bucket, which TensorFusion loses."""
    est = _est(fed(SERIES["A23"]))
    assert est.upper.vram_bytes > 8 * GI


def test_a20_recommendation_and_headroom() -> None:
    est = _est(fed(SERIES["A20"]))
    original = rl((10, 8), (20, 16))
    out = run(est, current=original, qos="medium")
    assert out is not None and not out.has_applied
    assert out.resources == raw((100, 1_717_986_918), (117, 3_435_973_836))
    capped = run(est, current=original, qos="medium",
                 processor=functools.partial(cap_to_headroom, current=original, max_allowed=res(50, 2000)))
    assert capped is not None and capped.resources == raw((50, 1_717_986_918), (117, 3_435_973_836))


@pytest.mark.parametrize(("original", "expected"), [
    (rl((10, 8), (20, 16)), raw((1, 1_717_986_918), (20, 3_435_973_836))),
    (rl((0.5, 2), (1, 4)), rl((1, 1), (1, 1))),
])
def test_a24_zero_usage_goes_to_floors_and_bounds(original: RequestLimit, expected: RequestLimit) -> None:
    out = run(_est(fed(SERIES["A24"])), current=original, qos="medium")
    assert out is not None and out.resources == expected and not out.has_applied


def test_young_workload_is_low_confidence_noop() -> None:
    agg = fed(SERIES["A20"])
    out = recommender.recommend(agg, config=DEFAULT, qos="", current=rl((10, 8), (20, 16)),
                                original=rl((10, 8), (20, 16)), processor=None, started_at=T0,
                                now=T0 + timedelta(minutes=29))
    assert out is not None and out.has_applied and out.reason == "LowConfidence"
    assert merge([out], current=rl((10, 8), (20, 16))) is None


# --- A32, A33 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("replicas", "expected"), [
    (1, Resources(milli_tflops=2_000_000, vram_bytes=2_147_483_648_000)),
    (2, Resources(milli_tflops=1_000_000, vram_bytes=1_073_741_824_000)),
    (0, None),
])
def test_a32_max_allowed_per_worker(replicas: int, expected: Resources | None) -> None:
    view = LedgerView()
    view.apply(node(gpu()))
    for i in range(replicas):
        view.apply(granted(spec(f"a-{i}")))
    assert view.max_allowed(("ml", "llama")) == expected


@pytest.mark.parametrize(("target", "compute", "vram"), [("", False, False), ("all", True, True),
                                                         ("compute", True, False), ("vram", False, True)])
def test_a33_should_scale(target: str, compute: bool, vram: bool) -> None:
    config = cfg.AutoScalingConfig(auto_set_resources=cfg.AutoSetResources(enable=True, target_resource=target))
    assert (cfg.should_scale(config, "compute"), cfg.should_scale(config, "vram")) == (compute, vram)


@pytest.mark.parametrize(("enable", "target", "expected"), [(True, "all", True), (False, "all", False),
                                                            (True, "", False)])
def test_a33_is_enabled(enable: bool, target: str, expected: bool) -> None:
    config = cfg.AutoScalingConfig(auto_set_resources=cfg.AutoSetResources(enable=enable, target_resource=target))
    assert cfg.is_enabled(config) is expected
