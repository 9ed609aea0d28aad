"""The GPUResourceQuota status patch built from the allocator's quota document (pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from services.admission.quota_sync import status_patch

T0, T1 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
PERCENT = {"requests.tflops": "40.00", "requests.vram": "100", "limits.tflops": "100", "limits.vram": "100",
           "workers": "100"}


def _doc(*, alert: bool, message: str = "m", available: dict[str, str] | None = None) -> dict[str, Any]:
    return {"namespace": "ns", "usage": {"requests": {"tflops": "60", "vram": "0"}, "limits": None, "workers": 1},
            "status": {"available_percent": available or PERCENT, "alert": alert, "message": message,
                       "reason": "AlertThresholdReached" if alert else "CapacitySufficient"}}


def _apply(obj: dict[str, Any], patch: dict[str, Any] | None) -> dict[str, Any]:
    assert patch is not None
    return {**obj, "status": {**obj.get("status", {}), **patch["status"]}}


def test_first_status_is_written_in_tensorfusions_shape() -> None:
    patch = status_patch({}, _doc(alert=True), now=T0)
    assert patch == {"status": {
        "used": {"requests": {"tflops": "60", "vram": "0"}, "limits": {"tflops": "0", "vram": "0"}, "workers": 1},
        "availablePercent": PERCENT, "lastUpdateTime": "2026-01-01T00:00:00Z",
        "conditions": [{"type": "Ready", "status": "False", "reason": "AlertThresholdReached", "message": "m",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}


def test_an_unchanged_status_is_not_written_again() -> None:
    obj = _apply({}, status_patch({}, _doc(alert=True), now=T0))
    assert status_patch(obj, _doc(alert=True), now=T1) is None


def test_transition_time_moves_only_with_the_condition_status() -> None:
    obj = _apply({}, status_patch({}, _doc(alert=True), now=T0))
    moved = _apply(obj, status_patch(obj, _doc(alert=True, message="other"), now=T1))
    assert moved["status"]["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert moved["status"]["conditions"][0]["message"] == "other"
    cleared = status_patch(moved, _doc(alert=False), now=T1)
    assert cleared is not None and cleared["status"]["conditions"][0]["lastTransitionTime"] == "2026-01-02T00:00:00Z"


def test_other_conditions_are_kept_and_no_status_means_no_patch() -> None:
    foreign = {"type": "Synced", "status": "True"}
    patch = status_patch({"status": {"conditions": [foreign]}}, _doc(alert=False), now=T0)
    assert patch is not None and patch["status"]["conditions"][1] == foreign
    assert status_patch({}, {"namespace": "ns", "status": None}, now=T0) is None
