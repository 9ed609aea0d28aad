"""The bulk fold (node index re-ranked once per changed node at the end) leaves a state that decides
exactly like one built by evolving event after event, also when the fold stops on a corrupt row."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings

from events import decisions as ev
from events.intents import RequestAllocation
from services.allocator.adapters.replay import fold
from services.allocator.domain import decide, evolve
from services.allocator.domain.state import ClusterState, digest
from services.allocator.ports import CorruptEventError, StoredEvent
from tests.contract import scenario
from tests.unit.eventlog.test_projection_properties import ACTIONS, _events

NOW = datetime(2026, 3, 2, tzinfo=UTC)


async def _stream(events: list[ev.AnyEvent], *, fail_at: int | None = None) -> AsyncIterator[StoredEvent]:
    for n, event in enumerate(events, start=1):
        if n == fail_at:
            raise CorruptEventError(f"event at position {n} (type 'x') cannot be decoded")
        yield StoredEvent(position=n, recorded_at=NOW, epoch=1, intent_id=f"i{n}", event=event)


def _one_by_one(events: list[ev.AnyEvent]) -> ClusterState:
    state = ClusterState.empty()
    for event in events:
        state = evolve(state, event)
    return state


def _decisions(state: ClusterState) -> list[list[ev.AnyEvent]]:
    requests = [scenario.spec(f"probe{k}", tflops=t, count=c) for k, (t, c) in enumerate(
        [(10_000, 1), (200_000, 1), (300_000, 2), (50_000, 3)])]
    return [decide(state, RequestAllocation(intent_id=s.allocation_id, spec=s), NOW) for s in requests]


@settings(max_examples=40, deadline=None)
@given(actions=ACTIONS)
def test_bulk_fold_decides_like_event_by_event_evolve(actions: list[tuple[str, int]]) -> None:
    events = [scenario.node("n2", gpus=2, model="H100"), *_events(actions), scenario.node("n3", gpus=1)]
    folded = asyncio.run(fold(ClusterState.empty(), _stream(events)))
    reference = _one_by_one(events)
    assert folded.position == len(events)
    assert digest(folded) == digest(reference)
    assert _decisions(folded) == _decisions(reference)


def test_a_fold_stopped_by_a_corrupt_row_still_leaves_a_consistent_index() -> None:
    events = [scenario.node("n1"), scenario.node("n2", model="H100"),
              scenario.granted(scenario.spec("a"), "n1", ["n1-gpu0"], minutes=1), scenario.node("n3")]
    state = ClusterState.empty()
    with pytest.raises(CorruptEventError, match="position 4"):
        asyncio.run(fold(state, _stream(events, fail_at=4)))
    assert state.position == 3
    assert _decisions(state) == _decisions(_one_by_one(events[:3]))
