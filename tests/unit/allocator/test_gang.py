"""Gang scheduling scenarios (issue 17): quorum at once, trickling members, two gangs competing,
timeout, quota too small for the gang, release after placement, multi-GPU members."""

from __future__ import annotations

import pytest

from events import decisions as ev
from events import intents as it
from events.values import AllocationSpec, GangSpec
from services.allocator.api import reasons, simulation
from services.allocator.domain import Scheduler, digest
from services.allocator.domain.model import GRANTED, QUEUED
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_quota, a_request


def member(key: str, i: int, *, quorum: int, desired: int | None = None, timeout_s: int = 0, count: int = 1,
           tflops: float = 100, vram: int = 10 * Gi, ns: str = "team-a", **kw: object) -> AllocationSpec:
    """Member ``i`` of gang ``ns/key`` asking ``count`` whole 100-TFLOPS GPUs by default."""
    gang = GangSpec(key=f"{ns}/{key}", quorum=quorum, desired=desired or quorum, timeout_s=timeout_s)
    return a_request(f"{key}-{i}", tflops, vram, count=count, pool="p", ns=ns, gang=gang, **kw)


def cluster(nodes: int = 2, gpus: int = 4) -> Cluster:
    c = Cluster()
    for n in range(nodes):
        c.node(f"n{n}", "p", *(a_gpu(f"n{n}-g{g}", 100, 10 * Gi) for g in range(gpus)))
    return c


def status(c: Cluster, uid: str) -> str:
    allocation = c.state.allocations.get(uid)
    return allocation.status if allocation else "gone"


def used_gpus(c: Cluster) -> int:
    return sum(1 for g in c.state.gpus.values() if g.charges)


def test_members_below_the_quorum_wait_holding_nothing_with_the_presence_reason() -> None:
    c = cluster()
    for i in range(5):
        out = c.request(member("trainer", i, quorum=8))
        assert isinstance(out, ev.AllocationQueued) and out.code == "gang"
    assert out.reason == "gang team-a/trainer: 5 of 8 members present, quorum 8"
    assert used_gpus(c) == 0
    assert reasons.current(c.state, c.state.allocations["trainer-0"].spec).reason == out.reason


def test_the_quorum_th_member_places_the_whole_quorum_in_one_decision() -> None:
    c = cluster()
    for i in range(7):
        c.request(member("trainer", i, quorum=8))
    out = c.send(it.RequestAllocation(intent_id="last", spec=member("trainer", 7, quorum=8)))
    grants = [e for e in out if isinstance(e, ev.AllocationGranted)]
    assert len(grants) == 8 and used_gpus(c) == 8
    assert [g.from_queue for g in grants] == [True] * 7 + [False]
    (placed,) = [e for e in out if isinstance(e, ev.GangPlaced)]
    assert (placed.key, placed.placed, placed.quorum, placed.nodes) == ("team-a/trainer", 8, 8, ("n0", "n1"))
    assert len(c.state.queue) == 0
    assert c.replayed_digest() == digest(c.state)


def test_members_beyond_the_quorum_are_ordinary_requests_after_placement() -> None:
    c = cluster()
    for i in range(2):
        c.request(member("w", i, quorum=2, desired=4))
    assert status(c, "w-0") == status(c, "w-1") == GRANTED
    assert isinstance(c.request(member("w", 2, quorum=2, desired=4)), ev.AllocationGranted)


def test_two_gangs_competing_for_room_for_one_exactly_one_is_placed_and_the_other_holds_nothing() -> None:
    c = cluster(nodes=2, gpus=4)  # 8 GPUs; each gang needs 6
    for i in range(5):
        c.request(member("a", i, quorum=6))
        c.request(member("b", i, quorum=6))
    c.request(member("a", 5, quorum=6))
    out = c.request(member("b", 5, quorum=6))
    assert all(status(c, f"a-{i}") == GRANTED for i in range(6))
    assert all(status(c, f"b-{i}") == QUEUED for i in range(6))
    assert used_gpus(c) == 6
    assert isinstance(out, ev.AllocationQueued) and out.code == "gang"
    assert "6 of 6 members present, quorum 6; member b-" in out.reason and "cannot fit" in out.reason
    # a releases: b is placed as a unit by the queue drain
    events = [e for i in range(6) for e in c.release(f"a-{i}")]
    assert next(e for e in events if isinstance(e, ev.GangPlaced)).key == "team-a/b"
    assert all(status(c, f"b-{i}") == GRANTED for i in range(6))


def test_timeout_releases_every_waiting_member_with_the_reason() -> None:
    c = cluster()
    c.request(member("t", 0, quorum=3, timeout_s=60))
    c.tick(30)
    c.request(member("t", 1, quorum=3, timeout_s=60))
    c.tick(20)
    assert not [e for e in c.send(it.CheckHeartbeats(intent_id="h1")) if isinstance(e, ev.GangTimedOut)]
    c.tick(10)
    out = c.send(it.CheckHeartbeats(intent_id="h2"))
    assert isinstance(out[0], ev.HeartbeatsChecked)
    (timed_out,) = [e for e in out if isinstance(e, ev.GangTimedOut)]
    assert timed_out.waiting == ("t-0", "t-1") and timed_out.present == 2
    released = [e for e in out if isinstance(e, ev.AllocationReleased)]
    assert [r.allocation_id for r in released] == ["t-0", "t-1"] and all(r.was_queued for r in released)
    assert released[0].reason == "gang team-a/t timed out after 60 s: 2 of 3 members present, quorum 3"
    assert not c.state.allocations and c.state.gangs.get("team-a/t") is None


def test_quota_too_small_for_the_whole_gang_places_none_and_names_the_quota() -> None:
    c = cluster()
    c.quota("team-a", a_quota(req=(350, 100 * Gi)))
    for i in range(3):
        c.request(member("q", i, quorum=4))
    out = c.request(member("q", 3, quorum=4))
    assert isinstance(out, ev.AllocationQueued) and out.code == "gang"
    assert "quota" in out.reason and out.quota_dimension
    assert used_gpus(c) == 0 and not c.state.usage


def test_release_after_placement_below_the_quorum_is_reported_as_degraded() -> None:
    c = cluster()
    for i in range(3):
        c.request(member("d", i, quorum=2, desired=3))
    out = c.release("d-0")
    assert not [e for e in out if isinstance(e, ev.GangDegraded)]
    out = c.release("d-1")
    (degraded,) = [e for e in out if isinstance(e, ev.GangDegraded)]
    assert (degraded.key, degraded.allocation_id, degraded.members, degraded.quorum) == ("team-a/d", "d-1", 1, 2)
    assert out.index(degraded) == 1


def test_multi_gpu_members_are_placed_together_on_nodes_that_hold_them() -> None:
    c = cluster(nodes=3, gpus=4)
    c.request(a_request("other", 100, 10 * Gi, pool="p", count=2))
    for i in range(3):
        c.request(member("m", i, quorum=3, count=4))
    assert used_gpus(c) == 2
    c.release("other")
    assert all(status(c, f"m-{i}") == GRANTED for i in range(3))
    assert sorted(c.state.allocations[f"m-{i}"].node for i in range(3)) == ["n0", "n1", "n2"]


def test_a_member_that_can_never_fit_is_rejected() -> None:
    c = cluster()
    out = c.request(member("x", 0, quorum=2, count=8))
    assert isinstance(out, ev.AllocationRejected) and out.code == "unschedulable"


@pytest.mark.parametrize(("quorum", "desired", "field"), [(1, 2, "spec.gang.quorum"), (3, 2, "spec.gang.quorum")])
def test_an_invalid_gang_is_rejected_naming_the_field(quorum: int, desired: int, field: str) -> None:
    c = cluster()
    out = c.request(member("v", 0, quorum=quorum, desired=desired))
    assert isinstance(out, ev.AllocationRejected) and out.field == field


def test_a_member_disagreeing_with_its_gang_is_rejected() -> None:
    c = cluster()
    c.request(member("v", 0, quorum=3))
    out = c.request(member("v", 1, quorum=2, desired=3))
    assert isinstance(out, ev.AllocationRejected) and out.field == "spec.gang"


def test_current_reason_says_which_member_cannot_fit_where() -> None:
    c = cluster(nodes=1, gpus=2)
    c.request(member("r", 0, quorum=2))
    c.request(member("r", 1, quorum=2, count=2))
    reason = reasons.current(c.state, c.state.allocations["r-0"].spec)
    assert reason.code == "gang"
    assert "member r-1 (r-1) cannot fit with 1 placed before it: 0/2 GPUs fit in pool p" in reason.reason


def test_a_preemption_spares_the_member_a_gang_needs_for_its_quorum() -> None:
    c = cluster(nodes=1, gpus=4)
    c.request(a_request("solo", 100, 10 * Gi, pool="p", qos="low"))
    c.request(a_request("other", 100, 10 * Gi, pool="p", qos="low"))
    c.tick(1)
    for i in range(2):  # a gang at its quorum, granted last: the least important by grant time alone
        c.request(member("g", i, quorum=2, qos="low"))
    out = c.send(it.RequestAllocation(intent_id="hi", spec=a_request("hi", 100, 10 * Gi, pool="p", qos="critical")))
    preempted = [e.allocation_id for e in out if isinstance(e, ev.AllocationPreempted)]
    assert len(preempted) == 1 and not preempted[0].startswith("g-")
    assert not [e for e in out if isinstance(e, ev.GangDegraded)]


def test_a_higher_priority_gang_preempts_as_a_unit_in_one_decision() -> None:
    c = cluster(nodes=1, gpus=2)
    c.request(a_request("low", 100, 10 * Gi, pool="p", count=2, qos="low"))
    c.request(member("hi", 0, quorum=2, qos="critical"))
    out = c.send(it.RequestAllocation(intent_id="hi-last", spec=member("hi", 1, quorum=2, qos="critical")))
    assert [type(e).__name__ for e in out] == [
        "AllocationPreempted", "AllocationGranted", "AllocationGranted", "GangPlaced"]
    assert status(c, "hi-0") == status(c, "hi-1") == GRANTED and status(c, "low") == "gone"
    assert c.replayed_digest() == digest(c.state)


def test_a_gang_that_preemption_cannot_complete_preempts_nothing() -> None:
    c = cluster(nodes=1, gpus=2)
    c.request(a_request("low", 100, 10 * Gi, pool="p", qos="low"))
    c.request(a_request("peer", 100, 10 * Gi, pool="p", qos="critical"))
    c.request(member("hi", 0, quorum=2, qos="critical"))
    out = c.request(member("hi", 1, quorum=2, qos="critical"))
    assert isinstance(out, ev.AllocationQueued) and out.code == "gang"
    assert "member hi-1 (hi-1) cannot fit with 1 placed before it" in out.reason  # after hi-0 took low's GPU
    assert status(c, "low") == status(c, "peer") == GRANTED


def test_a_failed_gang_trial_leaves_the_schedulers_caches_as_a_fresh_ones() -> None:
    c = cluster(nodes=3, gpus=1)
    c.request(a_request("low", 100, 10 * Gi, pool="p", qos="low"))  # on n0
    c.request(a_request("half", 50, 5 * Gi, pool="p", qos="low"))  # n1: half low, half critical
    c.request(a_request("crit", 50, 5 * Gi, pool="p", qos="critical"))
    for i in range(3):  # the trial: f-0 on n2, f-1 preempts low, f-2 finds no plan (a search is remembered)
        out = c.request(member("f", i, quorum=3, qos="high"))
    assert isinstance(out, ev.AllocationQueued) and "cannot fit with 2 placed before it" in out.reason
    state, kept, fresh = c.state, c.scheduler, Scheduler()
    assert kept.pool_floor(state, "p") == fresh.pool_floor(state, "p") == 0
    assert [kept.ranked(state, n) for n in state.nodes] == [fresh.ranked(state, n) for n in state.nodes]
    assert list(kept.node_order(state, "p")) == list(fresh.node_order(state, "p"))
    assert all(entry[0] <= state.changes.seq for entry in kept._no_plans.values())


def test_simulate_says_how_many_members_are_present() -> None:
    c = cluster()
    for i in range(4):
        c.request(member("trainer", i, quorum=8))
    result = simulation.simulate_spec(c.state, member("trainer", 4, quorum=8), now=c.now)
    assert result["outcome"]["reason"] == "gang team-a/trainer: 5 of 8 members present, quorum 8"
    assert len(c.state.allocations) == 4
