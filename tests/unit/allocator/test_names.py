"""Issue 28 item 11 at decide time: an intent from any producer naming a namespace, pod or pool that
Kubernetes would refuse is refused naming the field (the Pod parser and the HTTP API check first)."""

from __future__ import annotations

import pytest

from events import decisions as ev
from events import intents as it
from events.values import PoolConfig
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_quota, a_request

BAD = ["Upper-Case", "has space", "a/b", "..", "Team_B", "<script>", "a\tb", "x\u202ey", "-leading-dash", " "]


@pytest.mark.parametrize("bad", BAD)
def test_a_request_quota_pool_or_node_report_under_a_bad_name_is_refused(bad: str) -> None:
    c = Cluster()
    c.node("n1", "p", a_gpu("g0", 100, 40 * Gi))
    for field, spec in (("spec.namespace", a_request("a", 10, Gi, pool="p", ns=bad)),
                        ("spec.pod", a_request("b", 10, Gi, pool="p", pod=bad))):
        out = c.request(spec)
        assert isinstance(out, ev.AllocationRejected) and out.code == "invalid" and out.field == field, out
        assert "not a valid Kubernetes" in out.reason
    for intent, field in ((it.SetQuota(intent_id="q", namespace=bad, spec=a_quota(req=(10, Gi))), "namespace"),
                          (it.ConfigurePool(intent_id="c", pool=bad, config=PoolConfig()), "pool"),
                          (it.RegisterNode(intent_id="r", node="n2", pool=bad, gpus=()), "pool")):
        (out,) = c.send(intent)
        assert isinstance(out, ev.IntentRejected) and out.field == field and out.value == bad, out
    assert c.state.allocations == {} and c.state.quotas == {} and bad not in c.state.pools


def test_valid_names_and_a_generate_name_prefix_are_granted() -> None:
    c = Cluster()
    c.node("n1", "pool.a-1", a_gpu("g0", 100, 40 * Gi))
    assert isinstance(c.request(a_request("a", 10, Gi, pool="pool.a-1", ns="team-b", pod="web-0.x")),
                      ev.AllocationGranted)
    assert isinstance(c.request(a_request("b", 10, Gi, pool="pool.a-1", pod="train-")), ev.AllocationGranted)
