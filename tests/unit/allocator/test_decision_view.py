"""The API's answer to a resize shows the sizes it set (or asked for), not zeros."""

from __future__ import annotations

from datetime import UTC, datetime

from events import decisions
from events.values import Resources
from services.allocator.api.outcomes import decision_view

AT = datetime(2026, 3, 1, tzinfo=UTC)
GIB = 1 << 30


def test_a_resize_answer_carries_the_new_request_and_limit() -> None:
    event = decisions.AllocationResized(at=AT, allocation_id="team-a/p1", namespace="team-a", pool="default",
                                        request=Resources(milli_tflops=5_000, vram_bytes=4 * GIB),
                                        limit=Resources(milli_tflops=20_000, vram_bytes=4 * GIB),
                                        charges=(Resources(milli_tflops=5_000, vram_bytes=4 * GIB),))
    view = decision_view(event, 12)
    assert view["type"] == "allocation_resized" and view["allocation_id"] == "team-a/p1"
    assert view["request"] == {"tflops": "5", "vram": "4Gi"} and view["limit"] == {"tflops": "20", "vram": "4Gi"}


def test_a_refused_resize_answer_carries_what_was_asked_and_why() -> None:
    event = decisions.ResizeRejected(at=AT, allocation_id="team-a/p1", namespace="team-a", pool="default",
                                     request=Resources(milli_tflops=400_000), limit=Resources(milli_tflops=400_000),
                                     reason="does not fit", code="capacity")
    view = decision_view(event, 13)
    assert view["request"]["tflops"] == "400" and view["reason"] == "does not fit"
