"""Quota status: TensorFusion's available percent and alert (quota_store_test.go), exact."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.values import QuotaAmount, QuotaSpec
from services.allocator.api.quota_status import DIMENSIONS, READY_MESSAGE, available_fraction, quota_status
from services.allocator.domain.model import QuotaUsage


def _spec(tflops: int | None = 100_000, vram: int | None = 1000, workers: int | None = 10,
          threshold: int = 95) -> QuotaSpec:
    return QuotaSpec(total_requests=QuotaAmount(milli_tflops=tflops, vram_bytes=vram), max_workers=workers,
                     alert_threshold_percent=threshold)


def _usage(tflops: int = 0, vram: int = 0, workers: int = 0) -> QuotaUsage:
    return QuotaUsage(requests_milli_tflops=tflops, requests_vram_bytes=vram, workers=workers)


def test_half_used_is_fifty_percent_available() -> None:
    # TensorFusion quota_store_test.go CalculateAvailablePercent: 100 TF / 1000 B / 10 workers, half used
    status = quota_status(_spec(), _usage(50_000, 500, 5))
    assert status.available_percent == {"requests.tflops": "50.00", "requests.vram": "50.00",
                                        "limits.tflops": "100", "limits.vram": "100", "workers": "50.00"}
    assert not status.alert and status.reason == "CapacitySufficient" and status.message == READY_MESSAGE


def test_unbounded_is_100_and_an_explicit_zero_admits_nothing() -> None:
    assert quota_status(QuotaSpec(), None).available_percent == dict.fromkeys(DIMENSIONS, "100")
    zero = quota_status(_spec(tflops=0, vram=None, workers=None), None)
    assert zero.available_percent["requests.tflops"] == "0.00" and zero.alerts == ("requests.tflops",)


@pytest.mark.parametrize(("available", "threshold", "alert"), [
    (4, 95, True), (5, 95, False), (10, 95, False), (8, 90, True), (0, 100, False), (99, 0, True),
])
def test_alert_when_available_is_below_100_minus_threshold(available: int, threshold: int, alert: bool) -> None:
    # TensorFusion IsAlertThresholdReached: ("4",95) true, ("5",95) false, ("10",95) false, ("8",90) true
    status = quota_status(_spec(threshold=threshold), _usage(100_000 - available * 1000))
    assert status.available["requests.tflops"] == available
    assert status.alert is alert and (status.reason == "AlertThresholdReached") is alert


def test_the_alert_message_labels_each_flag_rightly() -> None:
    status = quota_status(_spec(), _usage(workers=10))
    assert status.alerts == ("workers",) and status.available_percent["workers"] == "0.00"
    assert status.message == ("One of the following resources has reached alert threshold: tflops limits: false, "
                              "tflops requests: false, vram limits: false, vram requests: false, workers: true")


def test_the_alert_compares_the_exact_value_not_the_rounded_string() -> None:
    status = quota_status(_spec(tflops=100_000_000), _usage(95_000_001))  # 4.999999 % left
    assert status.available_percent["requests.tflops"] == "5.00" and status.alerts == ("requests.tflops",)


def test_over_use_floors_at_zero() -> None:
    status = quota_status(_spec(workers=2), _usage(150_000, 2000, 3))
    assert status.available_percent["requests.tflops"] == "0.00" and status.available_percent["workers"] == "0.00"


@given(total=st.integers(1, 10**15), used=st.integers(0, 2 * 10**15), threshold=st.integers(0, 100))
def test_percent_is_exact_and_alert_matches_used_over_threshold(total: int, used: int, threshold: int) -> None:
    status = quota_status(_spec(tflops=total, threshold=threshold), _usage(used))
    value = status.available["requests.tflops"]
    assert value == max(Fraction(0), Fraction(100 * (total - used), total)) == available_fraction(total, used)
    assert abs(Fraction(status.available_percent["requests.tflops"]) - value) <= Fraction(1, 200)
    assert ("requests.tflops" in status.alerts) is (100 * used > threshold * total and threshold < 100)
