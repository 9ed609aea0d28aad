"""A request reusing a live allocation's id is refused as an intent (IntentRejected naming
spec.allocation_id) before its spec is checked: an AllocationRejected carrying that id would read,
to the binder and every reader of GPULEDGER_EVENTS, as the end of the live allocation (issue 28 item
4: a review from another namespace claiming a live id with a bad spec)."""

from __future__ import annotations

from events import decisions as ev
from tests.unit.allocator.builders import Gi, a_request, env_cluster, tf


def test_an_invalid_request_reusing_a_live_id_is_an_intent_rejection_and_keeps_the_allocation() -> None:
    c = env_cluster()
    first = c.request(a_request("victim", 10, Gi))
    reuse = c.request(a_request("victim", 10, Gi, count=0))  # gpu count 0: an invalid spec
    assert isinstance(first, ev.AllocationGranted) and isinstance(reuse, ev.IntentRejected), reuse
    assert reuse.field == "spec.allocation_id" and "already exists" in reuse.reason
    assert c.state.allocations["victim"].status == "granted"
    assert c.state.allocations["victim"].spec.request.milli_tflops == tf(10)


def test_an_invalid_request_with_a_new_id_is_still_an_allocation_rejection() -> None:
    out = env_cluster().request(a_request("fresh", 10, Gi, count=0))
    assert isinstance(out, ev.AllocationRejected) and out.field == "spec.gpu_count"
