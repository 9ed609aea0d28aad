"""Borrowing and reclaim in pools with shares (docs/allocation.md "Fair share"): borrowed marking,
borrowing limits, capacity other shares keep, reclaim through the preemption path, churn bounds."""

from __future__ import annotations

import msgspec

from events import decisions as ev
from events import intents as it
from events.values import AllocationSpec, GangSpec, ShareAmount, SharePool, ShareSpec
from services.allocator.domain import digest
from services.allocator.domain.state import decode_snapshot, encode_snapshot
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request, a_share


def _pool(gpus: int = 4, nodes: int = 1, **pool_kw: object) -> Cluster:
    c = Cluster()
    if pool_kw:
        c.pool("test-pool", **pool_kw)
    for n in range(nodes):
        c.node(f"node-{n}", "test-pool", *(a_gpu(f"gpu-{n}-{i}", 100, 40 * Gi) for i in range(gpus)))
    return c


def _whole(uid: str, ns: str, count: int = 1, **kw: object) -> AllocationSpec:
    return a_request(uid, 100, 40 * Gi, count=count, ns=ns, **kw)


def _grants(events: list[ev.AnyEvent]) -> dict[str, ev.AllocationGranted]:
    return {e.spec.allocation_id: e for e in events if isinstance(e, ev.AllocationGranted)}


def test_grants_within_the_guarantee_are_not_borrowed_beyond_are_and_other_pools_do_not_change() -> None:
    c = _pool()
    c.node("node-x", "other-pool", a_gpu("gpu-x", 100, 40 * Gi))
    c.share("alpha", a_share("ns-a", gpus=2))
    first = c.request(_whole("a1", "ns-a"))
    second = c.request(_whole("a2", "ns-a"))
    third = c.request(_whole("a3", "ns-a"))
    loner = c.request(_whole("n1", "ns-n"))
    assert isinstance(first, ev.AllocationGranted) and (first.share, first.borrowed) == ("alpha", False)
    assert isinstance(second, ev.AllocationGranted) and (second.share, second.borrowed) == ("alpha", False)
    assert isinstance(third, ev.AllocationGranted) and (third.share, third.borrowed) == ("alpha", True)
    assert isinstance(loner, ev.AllocationGranted) and (loner.share, loner.borrowed) == ("", True)
    elsewhere = c.request(a_request("x1", 10, Gi, pool="other-pool", ns="ns-a"))
    assert isinstance(elsewhere, ev.AllocationGranted) and (elsewhere.share, elsewhere.borrowed) == ("", False)
    assert c.state.allocations["a3"].borrowed and not c.state.allocations["a1"].borrowed
    assert c.replayed_digest() == digest(c.state)


def test_the_borrowing_limit_queues_with_code_share_naming_share_resource_and_figures() -> None:
    c = _pool()
    c.share("alpha", a_share("ns-a", gpus=1, borrow=ShareAmount(gpus=1)))
    c.request(_whole("a1", "ns-a"))
    c.request(_whole("a2", "ns-a"))
    waiting = c.request(_whole("a3", "ns-a"))
    assert isinstance(waiting, ev.AllocationQueued) and waiting.code == "share"
    assert waiting.reason == ("share alpha would use 3 GPUs in pool test-pool with this request, above its guarantee "
                              "1 GPU + borrowing limit 1 GPU = 2 GPUs")
    out = c.release("a1")
    assert "a3" in _grants(out)  # the share's usage fell: the queued request is retried in the whole pool


def test_a_parent_borrowing_limit_bounds_its_children() -> None:
    c = _pool()
    dept = ShareSpec(pools=(SharePool(pool="test-pool", guaranteed=ShareAmount(gpus=1),
                                      borrowing_limit=ShareAmount(gpus=0)),))
    c.share("dept", dept)
    c.share("team", a_share("ns-t", gpus=1, parent="dept"))
    assert isinstance(c.request(_whole("t1", "ns-t")), ev.AllocationGranted)
    waiting = c.request(_whole("t2", "ns-t"))
    assert isinstance(waiting, ev.AllocationQueued) and waiting.code == "share" and "share dept" in waiting.reason


def test_capacity_a_share_does_not_lend_stays_free_for_it() -> None:
    c = _pool(gpus=4)
    c.share("owner", a_share("ns-o", gpus=3, lend=ShareAmount(gpus=1)))  # keeps 2 of its 3 unused GPUs
    c.share("other", a_share("ns-x", gpus=0))
    assert isinstance(c.request(_whole("x1", "ns-x")), ev.AllocationGranted)
    assert isinstance(c.request(_whole("x2", "ns-x")), ev.AllocationGranted)
    waiting = c.request(_whole("x3", "ns-x"))
    assert isinstance(waiting, ev.AllocationQueued) and waiting.code == "share"
    assert waiting.reason == (
        "share other would borrow GPUs in pool test-pool that share owner keeps for its own requests: 1 GPU would be "
        "left of 4 GPUs, and 2 GPUs of unused guarantee is not lent (guarantee - lending limit)")
    o1 = c.request(_whole("o1", "ns-o"))
    assert isinstance(o1, ev.AllocationGranted) and not o1.borrowed


def test_a_share_below_its_guarantee_reclaims_borrowed_allocations_whatever_their_priority() -> None:
    c = _pool(gpus=4)
    c.share("alpha", a_share("ns-a", gpus=2))
    c.share("beta", a_share("ns-b", gpus=2))
    for i in range(4):
        c.request(_whole(f"a{i}", "ns-a", qos="critical"))  # alpha borrows the whole pool
    assert [c.state.allocations[f"a{i}"].borrowed for i in range(4)] == [False, False, True, True]
    c.tick(10)
    out = c.send(it.RequestAllocation(intent_id="b1", spec=_whole("b1", "ns-b", qos="low")))
    preempted = [e for e in out if isinstance(e, ev.AllocationPreempted)]
    assert len(preempted) == 1 and preempted[0].reclaim and preempted[0].allocation_id == "a2"  # ties: by id
    assert preempted[0].reason == (
        "reclaimed for share beta by ns-b/b1: share beta uses 0 GPUs of its guarantee 2 GPUs in pool test-pool; this "
        "allocation was borrowed by share alpha (it uses 4 GPUs, its guarantee is 2 GPUs); to fit on node-0 (gpu-0-2)")
    grant = _grants(out)["b1"]
    assert (grant.share, grant.borrowed, grant.preempted) == ("beta", False, ("a2",))
    assert c.state.reclaims["test-pool"] == [c.now]
    c.request(_whole("b2", "ns-b", qos="low"))
    assert "a3" not in c.state.allocations and set(c.state.allocations) >= {"a0", "a1", "b1", "b2"}
    beyond = c.request(_whole("b3", "ns-b", qos="low"))  # beta at its guarantee: borrowing never reclaims
    assert isinstance(beyond, ev.AllocationQueued)
    assert c.state.allocations["a0"].status == "granted" and c.state.allocations["a1"].status == "granted"
    assert c.replayed_digest() == digest(c.state)
    assert digest(decode_snapshot(encode_snapshot(c.state))) == digest(c.state)


def test_reclaim_never_takes_what_was_not_borrowed_nor_below_the_lenders_guarantee() -> None:
    c = _pool(gpus=4)
    c.share("alpha", a_share("ns-a", gpus=3))
    c.share("beta", a_share("ns-b", gpus=2))  # guarantees oversubscribe the pool
    for i in range(4):
        c.request(_whole(f"a{i}", "ns-a"))
    c.request(_whole("b1", "ns-b"))  # reclaims a3, the one borrowed
    assert "a3" not in c.state.allocations
    waiting = c.request(_whole("b2", "ns-b"))  # alpha is at its guarantee: nothing borrowed is left
    assert isinstance(waiting, ev.AllocationQueued)
    assert all(c.state.allocations[f"a{i}"].status == "granted" for i in range(3))


def test_reclaim_takes_lowest_priority_then_most_over_share_first_and_spares_protected_and_young() -> None:
    c = _pool(gpus=6, reclaim_min_runtime_s=60)
    c.share("alpha", a_share("ns-a", gpus=1))
    c.share("gamma", a_share("ns-g", gpus=0))
    c.share("beta", a_share("ns-b", gpus=3))
    c.request(_whole("a0", "ns-a"))
    c.request(_whole("a1", "ns-a", qos="high"))  # borrowed, high priority
    c.request(_whole("a2", "ns-a"))  # borrowed, medium
    c.request(_whole("g0", "ns-g"))  # borrowed, medium; gamma is less over its share than alpha
    c.request(_whole("a3", "ns-a", attributes={"tensor-fusion.ai/eviction-protection": "1h"}))
    c.request(_whole("g1", "ns-g", qos="high"))
    waiting = c.request(_whole("b1", "ns-b"))
    assert isinstance(waiting, ev.AllocationQueued)  # every borrowed allocation is younger than 60 s
    assert "reclaim" in waiting.reason
    c.tick(61)
    out = c.request(_whole("b2", "ns-b"))
    assert isinstance(out, ev.AllocationPreempted) and out.allocation_id == "a2" and out.reclaim
    taken = [e.allocation_id for e in c.events if isinstance(e, ev.AllocationPreempted)]
    # medium before high; alpha (3 over) before gamma (2 over); a3 protected; then the queued b1's turn
    assert taken == ["a2", "g0"]
    assert c.state.allocations["b1"].status == "granted" and c.state.allocations["a1"].status == "granted"
    assert "a3" in c.state.allocations  # protected


def test_reclaim_rate_is_bounded_per_pool_per_minute() -> None:
    c = _pool(gpus=4, reclaim_max_per_minute=1)
    c.share("alpha", a_share("ns-a", gpus=1))
    c.share("beta", a_share("ns-b", gpus=3))
    for i in range(4):
        c.request(_whole(f"a{i}", "ns-a"))
    assert isinstance(c.request(_whole("b1", "ns-b")), ev.AllocationPreempted)
    second = c.request(_whole("b2", "ns-b"))
    assert isinstance(second, ev.AllocationQueued) and "reclaim_max_per_minute" in second.reason
    c.tick(61)
    c.release("a0")  # any event in the pool retries the queue: the minute has passed
    assert c.state.allocations["b2"].status == "granted"


def test_a_gang_is_reclaimed_whole_or_not_at_all() -> None:
    c = _pool(gpus=2, nodes=2)
    c.share("alpha", a_share("ns-a", gpus=0))
    c.share("beta", a_share("ns-b", gpus=2))
    gang = GangSpec(key="ns-a/train", quorum=2, desired=2)
    c.request(_whole("g1", "ns-a", count=2, gang=gang))
    c.request(_whole("g2", "ns-a", count=2, gang=gang))
    assert c.state.allocations["g1"].status == "granted" and c.state.allocations["g2"].status == "granted"
    out = c.send(it.RequestAllocation(intent_id="b", spec=_whole("b1", "ns-b")))
    taken = sorted(e.allocation_id for e in out if isinstance(e, ev.AllocationPreempted))
    assert taken == ["g1", "g2"]
    assert _grants(out)["b1"].share == "beta"


def test_a_gang_below_its_guarantee_reclaims_for_its_whole_quorum_or_takes_nothing() -> None:
    c = _pool(gpus=2, nodes=2)
    c.share("alpha", a_share("ns-a", gpus=0))
    c.share("beta", a_share("ns-b", gpus=2))
    for i in range(4):
        c.request(_whole(f"a{i}", "ns-a", qos="critical"))  # alpha borrows all four GPUs
    c.tick(10)
    gang = GangSpec(key="ns-b/train", quorum=2, desired=2)
    first = c.request(_whole("b1", "ns-b", qos="low", gang=gang))
    assert isinstance(first, ev.AllocationQueued)  # a gang waits for its quorum
    out = c.send(it.RequestAllocation(intent_id="b2", spec=_whole("b2", "ns-b", qos="low", gang=gang)))
    taken = [e for e in out if isinstance(e, ev.AllocationPreempted)]
    assert len(taken) == 2 and all(t.reclaim for t in taken)  # one GPU per member, within beta's 2
    grants = _grants(out)
    assert set(grants) == {"b1", "b2"} and all(g.share == "beta" and not g.borrowed for g in grants.values())
    assert sorted(p for g in grants.values() for p in g.preempted) == sorted(t.allocation_id for t in taken)
    assert c.replayed_digest() == digest(c.state)


def test_a_gang_whose_quorum_would_go_beyond_its_guarantee_reclaims_nothing() -> None:
    c = _pool(gpus=2, nodes=2)
    c.share("alpha", a_share("ns-a", gpus=0))
    c.share("beta", a_share("ns-b", gpus=1))  # one GPU guaranteed, the quorum needs two
    for i in range(4):
        c.request(_whole(f"a{i}", "ns-a", qos="critical"))
    c.tick(10)
    gang = GangSpec(key="ns-b/train", quorum=2, desired=2)
    c.request(_whole("b1", "ns-b", qos="low", gang=gang))
    out = c.send(it.RequestAllocation(intent_id="b2", spec=_whole("b2", "ns-b", qos="low", gang=gang)))
    assert not [e for e in out if isinstance(e, ev.AllocationPreempted | ev.AllocationGranted)]
    assert all(c.state.allocations[f"a{i}"].status == "granted" for i in range(4))


def test_a_gang_reclaim_counts_the_pools_earlier_reclaims_of_the_minute() -> None:
    c = _pool(gpus=2, nodes=2, reclaim_max_per_minute=2)
    c.share("alpha", a_share("ns-a", gpus=0))
    c.share("beta", a_share("ns-b", gpus=3))
    for i in range(4):
        c.request(_whole(f"a{i}", "ns-a", qos="critical"))
    c.tick(10)
    assert isinstance(c.request(_whole("b0", "ns-b", qos="low")), ev.AllocationPreempted)  # 1 of the 2
    gang = GangSpec(key="ns-b/train", quorum=2, desired=2)
    c.request(_whole("b1", "ns-b", qos="low", gang=gang))
    out = c.send(it.RequestAllocation(intent_id="b2", spec=_whole("b2", "ns-b", qos="low", gang=gang)))
    assert not [e for e in out if isinstance(e, ev.AllocationPreempted)]  # the quorum needs 2, 1 is left
    assert len(c.state.reclaims["test-pool"]) == 1


def test_an_allocation_granted_within_its_guarantee_is_never_reclaimed_even_of_lower_priority() -> None:
    c = _pool(gpus=4)
    c.share("alpha", a_share("ns-a", gpus=2))
    c.share("beta", a_share("ns-b", gpus=2))
    c.request(_whole("a0", "ns-a", qos="low"))
    c.request(_whole("a1", "ns-a", qos="low"))
    c.request(_whole("a2", "ns-a", qos="critical"))  # borrowed
    c.request(_whole("a3", "ns-a", qos="critical"))  # borrowed
    out = c.request(_whole("b0", "ns-b", qos="low"))
    assert isinstance(out, ev.AllocationPreempted) and out.reclaim and out.allocation_id == "a2"
    assert out.priority == 100_000 and out.preemptor_priority == 0


def test_a_partitioned_request_reclaims_a_borrowed_partition_and_takes_its_slots() -> None:
    c = Cluster()
    mig = msgspec.structs.replace(a_gpu("g0", 700, 80 * Gi, model="A100_SXM_80G", index=0))
    c.node("n1", "test-pool", mig)
    c.share("alpha", a_share("ns-a", gpus=0))
    c.share("beta", a_share("ns-b", gpus=1))
    big = a_request("a1", ns="ns-a", isolation="partitioned", partition_template="7g.80gb")
    first = c.request(big)
    assert isinstance(first, ev.AllocationGranted) and first.borrowed
    mine = a_request("b1", ns="ns-b", isolation="partitioned", partition_template="3g.40gb")
    out = c.send(it.RequestAllocation(intent_id="b1", spec=mine))
    assert [type(e).__name__ for e in out] == ["AllocationPreempted", "AllocationGranted"]
    assert out[0].reclaim and out[0].allocation_id == "a1"  # type: ignore[union-attr]
    grant = out[1]
    assert isinstance(grant, ev.AllocationGranted) and grant.partitions[0].template == "3g.40gb"
    assert (grant.share, grant.borrowed) == ("beta", False)
    assert c.state.gpus["g0"].partitions.keys() == {"b1"}


def test_percent_requests_count_converted_tflops_in_the_share_usage() -> None:
    c = _pool(gpus=2)
    c.share("alpha", a_share("ns-a", tflops=60))
    within = c.request(a_request("p1", ns="ns-a", percent=50))  # 50 % of 100 TFLOPS
    beyond = c.request(a_request("p2", ns="ns-a", percent=20))  # 70 TFLOPS > 60
    assert isinstance(within, ev.AllocationGranted) and not within.borrowed
    assert isinstance(beyond, ev.AllocationGranted) and beyond.borrowed
    assert c.state.share_index.usage_of("alpha", "test-pool").milli_tflops == 70_000


def test_a_team_reclaims_from_its_sibling_and_a_parent_keeps_its_guarantee_from_outside() -> None:
    c = _pool(gpus=4)
    dept = ShareSpec(pools=(SharePool(pool="test-pool", guaranteed=ShareAmount(gpus=2)),))
    c.share("dept", dept)
    c.share("team-a", a_share("ns-a", gpus=1, parent="dept"))
    c.share("team-b", a_share("ns-b", gpus=1, parent="dept"))
    c.share("other", a_share("ns-o", gpus=2))
    c.request(_whole("a0", "ns-a"))
    c.request(_whole("a1", "ns-a"))  # team-a borrows (dept at its guarantee: 2 GPUs)
    c.request(_whole("o0", "ns-o"))
    c.request(_whole("o1", "ns-o"))
    out = c.send(it.RequestAllocation(intent_id="b0", spec=_whole("b0", "ns-b")))
    taken = [e.allocation_id for e in out if isinstance(e, ev.AllocationPreempted)]
    assert taken == ["a1"]  # team-b within its guarantee takes its sibling's borrowed GPU, not other's
    assert _grants(out)["b0"].share == "team-b" and not _grants(out)["b0"].borrowed
