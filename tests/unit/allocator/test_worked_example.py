"""The worked example of docs/allocation.md, step by step (keeps the document honest)."""

from __future__ import annotations

from events import decisions as ev
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_quota, a_request, tf


def test_docs_allocation_worked_example() -> None:
    c = Cluster()
    c.node("node-a", "train", a_gpu("a-0", 100, 40 * Gi), a_gpu("a-1", 100, 40 * Gi))
    c.node("node-b", "train", a_gpu("b-0", 100, 40 * Gi))
    c.quota("ml", a_quota(req=(150, 1000 * Gi)))

    p1 = c.request(a_request("p1", 0, 10 * Gi, percent=50, pool="train", ns="ml"))
    assert isinstance(p1, ev.AllocationGranted) and (p1.node, p1.gpus) == ("node-a", ("a-0",))
    assert p1.charges[0].milli_tflops == tf(50) and p1.charges[0].vram_bytes == 10 * Gi
    assert c.state.usage["ml"].requests_milli_tflops == tf(50) and c.state.usage["ml"].workers == 1
    c.scheduler.sync(c.state)
    assert c.scheduler.index.sort_key("node-a") == (-16, "node-a")

    p2 = c.request(a_request("p2", 60, 10 * Gi, count=2, pool="train", ns="ml"))
    assert isinstance(p2, ev.AllocationQueued) and p2.code == "quota"
    assert p2.quota_dimension == "total.max.tflops.request"
    assert p2.reason == ("quota exceeded in namespace ml for total.max.tflops.request: 50 TFLOPS in use + "
                         "120 TFLOPS requested = 170 TFLOPS, above the limit of 150 TFLOPS (113.3 % of it)")

    out = c.release("p1")
    assert isinstance(out[0], ev.AllocationReleased)
    assert isinstance(out[1], ev.AllocationGranted) and out[1].from_queue
    assert (out[1].node, out[1].gpus) == ("node-a", ("a-0", "a-1"))
