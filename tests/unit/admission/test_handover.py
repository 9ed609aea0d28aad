"""The handover state machine: a preemptor's gate waits for exactly its victims' pods to be gone."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from events import decisions
from events.values import AllocationSpec, Resources
from services.admission.book import AllocationBook
from services.admission.handover import Handover

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def preempted(victim: str, preemptor: str = "big") -> decisions.AllocationPreempted:
    return decisions.AllocationPreempted(
        at=NOW, allocation_id=victim, namespace="default", pod=f"pod-{victim}", pool="p", node="n", gpus=("g0",),
        preemptor=preemptor, preemptor_namespace="default", preemptor_pod="pod-big", priority=0,
        preemptor_priority=100_000, reason="critical over medium")


def test_a_grant_without_victims_is_ungated_at_once() -> None:
    handover = Handover()
    assert handover.granted("a", ()) and not handover.blocked("a")


def test_the_gate_waits_for_every_victim_and_is_freed_once_by_the_last() -> None:
    handover = Handover()
    for victim in ("v1", "v2"):
        assert handover.preempted(preempted(victim)) is not None
    assert not handover.granted("big", ("v1", "v2")) and handover.blocked("big")
    assert handover.victim_gone("v2") == [] and handover.blocked("big")
    assert handover.victim_gone("v1") == ["big"] and not handover.blocked("big")
    assert handover.victim_gone("v1") == []  # a second observation frees nothing twice


def test_a_victim_gone_before_the_grant_is_folded_is_not_waited_for() -> None:
    handover = Handover()
    handover.preempted(preempted("v1"))
    assert handover.victim_gone("v1") == []
    assert handover.granted("big", ("v1",))
    assert handover.preempted(preempted("v1")) is None  # replayed again: nothing left to evict


def test_a_preemptor_that_ends_waits_for_nothing_and_victims_stay_victims() -> None:
    handover = Handover()
    handover.preempted(preempted("v1"))
    handover.granted("big", ("v1",))
    handover.ended("big")
    assert not handover.blocked("big") and handover.victim_gone("v1") == []
    assert handover.is_victim("v1") and not handover.is_victim("big")


def test_the_book_forgets_a_preempted_allocation_so_its_pod_releases_nothing() -> None:
    book = AllocationBook()
    spec = AllocationSpec(allocation_id="v1", namespace="default", pod="pod-v1", pool="p",
                          request=Resources(milli_tflops=1000), limit=Resources(milli_tflops=1000))
    book.apply(decisions.AllocationGranted(at=NOW, spec=spec, node="n", gpus=("g0",), charges=(spec.request,)))
    assert "v1" in book.live()
    book.apply(preempted("v1"))
    assert "v1" not in book.live()


@given(victims=st.lists(st.sampled_from("abcdef"), min_size=1, max_size=6, unique=True),
       observations=st.lists(st.sampled_from("abcdefg"), max_size=14), grant_at=st.integers(min_value=0))
def test_freed_exactly_once_and_only_when_every_victim_was_observed_gone(
        victims: list[str], observations: list[str], grant_at: int) -> None:
    handover = Handover()
    for victim in victims:
        handover.preempted(preempted(victim))
    grant_at %= len(observations) + 1
    freed, seen = 0, set()
    for index, gone in enumerate([*observations, None]):
        if index == grant_at:
            freed += handover.granted("big", tuple(victims))
        if gone is not None:
            seen.add(gone)
            freed += handover.victim_gone(gone).count("big")
        waited_for_all = set(victims) <= seen
        assert handover.blocked("big") == (index >= grant_at and not waited_for_all)
    assert freed == (1 if set(victims) <= seen else 0)
