"""Preemption scenarios (issue 16), table-driven: who may take GPUs from whom, where, and why not."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import pytest

from events import decisions as ev
from events import intents as it
from events.values import AllocationSpec
from services.allocator.domain import digest
from services.allocator.domain.deadlines import parse_duration
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_quota, a_request

PROTECT = "tensor-fusion.ai/eviction-protection"


def ask(c: Cluster, spec: AllocationSpec) -> list[ev.AnyEvent]:
    """Every event of one request (preemptions first, then the outcome)."""
    return c.send(it.RequestAllocation(intent_id=f"ask-{spec.allocation_id}", spec=spec))


def victims(events: list[ev.AnyEvent]) -> list[str]:
    return [e.allocation_id for e in events if isinstance(e, ev.AllocationPreempted)]


def one_gpu_node(c: Cluster, name: str = "n", pool: str = "p") -> None:
    c.node(name, pool, a_gpu(f"{name}-g0", 100, 10 * Gi))


class Case(NamedTuple):
    name: str
    setup: Callable[[Cluster], None]
    preemptor: AllocationSpec
    victims: list[str]
    outcome: type
    reason: str = ""


def _full_of(qos: str, **kw: object) -> Callable[[Cluster], None]:
    def setup(c: Cluster) -> None:
        one_gpu_node(c)
        c.request(a_request("holder", 100, 10 * Gi, pool="p", qos=qos, **kw))
    return setup


def _protected(c: Cluster) -> None:
    one_gpu_node(c)
    c.request(a_request("holder", 100, 10 * Gi, pool="p", qos="low", attributes={PROTECT: "30m"}))


def _multi_gpu(c: Cluster) -> None:
    c.node("n", "p", a_gpu("g0", 100, 10 * Gi), a_gpu("g1", 100, 10 * Gi))
    c.request(a_request("low", 100, 10 * Gi, pool="p", qos="low"))  # takes one GPU whole; the other is free


def _quota_two_namespaces(c: Cluster) -> None:
    # n1 holds the OTHER namespace's low work: freeing it makes room on the GPU but not in ns a's quota
    one_gpu_node(c, "n1")
    one_gpu_node(c, "n2")
    c.quota("a", a_quota(req=(100, 10 * Gi)))
    c.request(a_request("b-low", 100, 10 * Gi, pool="p", ns="b", qos="low"))
    c.request(a_request("a-low", 100, 10 * Gi, pool="p", ns="a", qos="low"))


def _quota_other_namespace_only(c: Cluster) -> None:
    one_gpu_node(c, "n1")
    c.quota("a", a_quota(req=(100, 10 * Gi)))
    c.request(a_request("b-low", 100, 10 * Gi, pool="p", ns="b", qos="low"))
    c.node("n2", "p", a_gpu("n2-g0", 100, 10 * Gi))
    c.request(a_request("a-high", 100, 10 * Gi, pool="p", ns="a", qos="high"))


def _scoped(c: Cluster) -> None:
    c.pool("p", preemption="namespace")
    one_gpu_node(c, "n1")
    one_gpu_node(c, "n2")
    c.request(a_request("other-low", 100, 10 * Gi, pool="p", ns="other", qos="low"))
    c.request(a_request("own-low", 100, 10 * Gi, pool="p", ns="default", qos="low"))


def _off(c: Cluster) -> None:
    c.pool("p", preemption="off")
    _full_of("low")(c)


def _fewest_lowest(c: Cluster) -> None:
    # n1: two low allocations of 50 each; n2: one PriorityClass-500 allocation; n3: one low of 100
    for n in ("n1", "n2", "n3"):
        one_gpu_node(c, n)
    c.request(a_request("n1-a", 50, 5 * Gi, pool="p", qos="low", gpu_indices=()))
    c.request(a_request("n1-b", 50, 5 * Gi, pool="p", qos="low"))
    c.request(a_request("n2-pc", 100, 10 * Gi, pool="p", qos="low", priority=500))
    c.request(a_request("n3-a", 100, 10 * Gi, pool="p", qos="low"))


CASES = [
    Case("critical over low on a full node", _full_of("low"), a_request("crit", 100, 10 * Gi, pool="p",
         qos="critical"), ["holder"], ev.AllocationGranted),
    Case("critical over high", _full_of("high"), a_request("crit", 10, Gi, pool="p", qos="critical"),
         ["holder"], ev.AllocationGranted),
    Case("high cannot preempt high", _full_of("high"), a_request("h2", 10, Gi, pool="p", qos="high"),
         [], ev.AllocationQueued),
    Case("medium cannot preempt low", _full_of("low"), a_request("m", 10, Gi, pool="p", qos="medium"),
         [], ev.AllocationQueued),
    Case("a PriorityClass value preempts a lower one", _full_of("medium", priority=5),
         a_request("pc", 10, Gi, pool="p", qos="medium", priority=6), ["holder"], ev.AllocationGranted),
    Case("protected victim spared", _protected, a_request("crit", 10, Gi, pool="p", qos="critical"),
         [], ev.AllocationQueued, "1 protected by eviction-protection"),
    Case("multi-GPU preemption uses the node's other free GPU", _multi_gpu,
         a_request("crit2", 100, 10 * Gi, count=2, pool="p", qos="critical"), ["low"], ev.AllocationGranted),
    Case("quota freed only by same-namespace victims", _quota_two_namespaces,
         a_request("crit", 100, 10 * Gi, pool="p", ns="a", qos="critical"), ["a-low"], ev.AllocationGranted),
    Case("other namespaces' victims never free quota", _quota_other_namespace_only,
         a_request("crit", 10, Gi, pool="p", ns="a", qos="critical"), ["a-high"], ev.AllocationGranted),
    Case("nothing preempted when the request can never fit", _full_of("low"),
         a_request("huge", 200, 10 * Gi, pool="p", qos="critical"), [], ev.AllocationRejected),
    Case("preemption off", _off, a_request("crit", 10, Gi, pool="p", qos="critical"), [], ev.AllocationQueued),
    Case("namespace scope takes only the own namespace", _scoped,
         a_request("crit", 100, 10 * Gi, pool="p", qos="critical"), ["own-low"], ev.AllocationGranted),
    Case("lowest highest-victim priority, then fewest victims", _fewest_lowest,
         a_request("crit", 100, 10 * Gi, pool="p", qos="critical"), ["n3-a"], ev.AllocationGranted),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_preemption_scenarios(case: Case) -> None:
    c = Cluster()
    case.setup(c)
    before = {aid: a.status for aid, a in c.state.allocations.items()}
    events = ask(c, case.preemptor)
    assert victims(events) == case.victims
    outcome = events[-1]
    assert isinstance(outcome, case.outcome)
    if isinstance(outcome, ev.AllocationGranted):
        assert list(outcome.preempted) == case.victims
        for aid in case.victims:
            assert aid not in c.state.allocations
    else:
        assert {aid: a.status for aid, a in c.state.allocations.items() if aid in before} == before
    if case.reason:
        assert case.reason in getattr(outcome, "reason", "")
    assert c.replayed_digest() == digest(c.state)
    for event in events:
        if isinstance(event, ev.AllocationPreempted):
            assert event.preemptor == case.preemptor.allocation_id and event.priority < event.preemptor_priority


def test_the_victim_on_the_chosen_gpu_goes_and_charges_come_back_exactly() -> None:
    c = Cluster()
    c.node("n", "p", a_gpu("g0", 100, 10 * Gi), a_gpu("g1", 100, 10 * Gi))
    for uid, tflops in (("a", 60), ("b", 60), ("c", 30)):
        c.request(a_request(uid, tflops, tflops * Gi // 10, pool="p", qos="low"))
    events = ask(c, a_request("crit", 70, 7 * Gi, pool="p", qos="critical"))
    grant = events[-1]
    assert isinstance(grant, ev.AllocationGranted) and len(victims(events)) == 1
    (victim,) = [e for e in events if isinstance(e, ev.AllocationPreempted)]
    assert victim.gpus == grant.gpus
    used = sum(g.used_milli_tflops for g in c.state.gpus.values())
    assert used == sum(ch.milli_tflops for a in c.state.allocations.values() for ch in a.charges)
    assert c.replayed_digest() == digest(c.state)


def test_protection_ends_after_its_duration() -> None:
    c = Cluster()
    _protected(c)
    assert isinstance(ask(c, a_request("early", 10, Gi, pool="p", qos="critical"))[-1], ev.AllocationQueued)
    c.tick(31 * 60)
    assert victims(ask(c, a_request("late", 10, Gi, pool="p", qos="critical"))) == ["holder"]


def test_a_queued_request_preempts_when_the_drain_retries_it() -> None:
    c = Cluster()
    c.node("n", "p", a_gpu("g0", 100, 10 * Gi), a_gpu("g1", 100, 10 * Gi))
    c.request(a_request("prot", 100, 10 * Gi, pool="p", qos="low", attributes={PROTECT: "10m"}))
    c.request(a_request("small", 20, 2 * Gi, pool="p", qos="low"))
    c.request(a_request("fill", 80, 8 * Gi, pool="p", qos="low", attributes={PROTECT: "10m"}))
    assert isinstance(ask(c, a_request("crit", 50, 5 * Gi, pool="p", qos="critical"))[-1], ev.AllocationQueued)
    c.tick(11 * 60)
    events = c.release("small")  # frees 20 on g1: not enough, so the retried request preempts
    assert victims(events) and isinstance(events[-1], ev.AllocationGranted) and events[-1].from_queue


def test_a_per_workload_cap_rejects_without_preempting() -> None:
    c = Cluster()
    _full_of("low")(c)
    c.quota("default", a_quota(max_gpu_count=1))
    events = ask(c, a_request("crit", 10, Gi, count=2, pool="p", qos="critical"))
    assert victims(events) == [] and isinstance(events[-1], ev.AllocationRejected)


def test_a_remembered_failed_search_looks_again_at_every_touched_node() -> None:
    """A failed search is remembered per shape; the next one searches the nodes touched since, all of them."""
    c = Cluster()
    for n in ("n1", "n2", "n3"):
        one_gpu_node(c, n)
        c.request(a_request(f"{n}-low", 50, 5 * Gi, pool="p", qos="low"))
        c.request(a_request(f"{n}-high", 50, 5 * Gi, pool="p", qos="high"))
    first = ask(c, a_request("crit-1", 80, 8 * Gi, pool="p", qos="high"))  # high cannot preempt high
    assert "no preemption: even without every candidate" in getattr(first[-1], "reason", "")
    c.release("crit-1")
    c.release("n1-high")  # n1 now holds low work only (touched first) ...
    c.request(a_request("n1-low2", 50, 5 * Gi, pool="p", qos="low"))
    c.release("n3-low")  # ... and n3 is touched last but still holds high work
    c.request(a_request("n3-low2", 40, 4 * Gi, pool="p", qos="low"))
    events = ask(c, a_request("crit-2", 80, 8 * Gi, pool="p", qos="high"))
    assert isinstance(events[-1], ev.AllocationGranted) and events[-1].node == "n1"
    assert sorted(victims(events)) == ["n1-low", "n1-low2"]


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90.0), ("1h30m", 5400.0), ("1.5h", 5400.0), ("300ms", 0.3),
                                               ("", None), ("10", None), ("1x", None), ("h", None)])
def test_eviction_protection_durations_are_go_durations(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


def test_an_absurdly_long_protection_protects_for_good_without_failing() -> None:
    c = Cluster()
    one_gpu_node(c)
    c.request(a_request("holder", 100, 10 * Gi, pool="p", qos="low", attributes={PROTECT: "9" * 400 + "h"}))
    assert isinstance(ask(c, a_request("crit", 10, Gi, pool="p", qos="critical"))[-1], ev.AllocationQueued)
