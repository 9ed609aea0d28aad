"""GPUResourceQuota objects beyond the contract's bounds are not published (the allocator would refuse them)."""

from __future__ import annotations

from events.intents import SetQuota
from services.admission.view import ClusterView
from services.admission.watches import QuotaTracker


def _quota(vram: str, *, name: str = "q", version: str = "1") -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "team-a", "resourceVersion": version},
            "spec": {"total": {"requests": {"tflops": "100", "vram": vram}}}}


def test_quota_totals_beyond_the_bound_are_logged_and_not_published() -> None:
    view = ClusterView()
    tracker = QuotaTracker(view)
    assert tracker.apply("ADDED", _quota("8Ei")) is None  # 2^63 bytes: beyond BIGINT
    assert "team-a" not in view.quotas
    intent = tracker.apply("MODIFIED", _quota("4Ei", version="2"))  # 2^62: the largest allowed
    assert isinstance(intent, SetQuota) and intent.spec.total_requests is not None
    assert intent.spec.total_requests.vram_bytes == 2**62 and view.quotas["team-a"] == intent.spec
