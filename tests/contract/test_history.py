"""History contract (the read side's port): events of an allocation, the newest life of a pod, and
current reasons fenced by position. Every test runs against the in-memory twin and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from events import decisions as ev
from services.allocator.domain import evolve
from services.allocator.domain.state import ClusterState
from services.allocator.ports import DecidedIntent, History
from tests.contract import scenario
from tests.contract.conftest import Backend

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


async def _story(backend: Backend, batches: list[list[DecidedIntent]]) -> ClusterState:
    lease = await backend.leases.acquire("allocator", holder="a", ttl_s=10, now=NOW)
    assert lease is not None
    state = ClusterState.empty()
    for batch in batches:
        state = scenario.fold_batch(state, batch)
        stored = await backend.events.append(batch, lease="allocator", epoch=lease.epoch, state=state)
        state.position = stored[-1].position
    return state


def _intent(i: int, *events: ev.AnyEvent) -> DecidedIntent:
    return DecidedIntent(intent_id=f"extra-{i}", stream_seq=100 + i, events=events)


async def test_events_of_an_allocation_are_every_event_naming_it_in_order(backend: Backend) -> None:
    history: History = backend.events
    story = scenario.story()
    await _story(backend, [story])
    stored = [s async for s in backend.events.read()]
    for allocation_id in ("a", "b", "c", "d", "big"):
        expected = [s for s in stored if getattr(getattr(s.event, "spec", None), "allocation_id", None) == allocation_id
                    or getattr(s.event, "allocation_id", None) == allocation_id]
        found = await history.events_of(allocation_id, limit=500)
        assert found == expected and found, allocation_id
    assert [type(s.event) for s in await history.events_of("a", limit=500)] == [ev.AllocationGranted,
                                                                                ev.AllocationResized]
    assert len(await history.events_of("d", limit=1)) == 1  # the oldest first
    assert await history.events_of("nobody", limit=500) == []


async def test_the_newest_life_of_a_pod_is_found_by_namespace_and_pod(backend: Backend) -> None:
    history: History = backend.events
    story = scenario.story()
    again = msgspec.structs.replace(scenario.spec("d2"), pod="pod-d")
    await _story(backend, [story, [_intent(1, scenario.granted(again, "n1", ["n1-gpu1"], minutes=50))]])
    assert await history.newest_of_pod("team-a", "pod-d") == "d2"  # two lives of pod-d: the newer
    assert await history.newest_of_pod("team-a", "pod-big") == "big"  # a rejected request is a life too
    assert await history.newest_of_pod("team-b", "pod-d") == ""
    assert await history.newest_of_pod("team-a", "no-such-pod") == ""


async def test_reasons_land_on_queued_rows_unless_an_event_changed_them_after_their_position(
        backend: Backend) -> None:
    history: History = backend.events
    story = scenario.story()
    state = await _story(backend, [story[:5]])  # c is queued at the end of story[:5]
    queued_at = state.position
    rows = {"c": ("waits for quota", "quota", "tflops"), "a": ("granted: ignored", "x", "")}
    assert await history.write_reasons(rows, position=queued_at - 1) == 0  # computed before c was queued
    assert await history.write_reasons(rows, position=queued_at) == 1  # only c: a is granted
    models = await backend.events.read_models()
    (row,) = [r for r in models.allocations if r["allocation_id"] == "c"]
    assert (row["reason"], row["code"], row["quota_dimension"]) == rows["c"]
    await _story_more(backend, story[5:])
    models = await backend.events.read_models()
    (row,) = [r for r in models.allocations if r["allocation_id"] == "c"]
    assert row["status"] == "granted"
    assert await history.write_reasons(rows, position=10_000) == 0  # no longer queued
    assert await history.write_reasons({}, position=10_000) == 0


async def _story_more(backend: Backend, rest: list[DecidedIntent]) -> None:
    state = ClusterState.empty()
    async for stored in backend.events.read():
        state = evolve(state, stored.event)
        state.position = stored.position
    lease = await backend.leases.acquire("allocator", holder="a", ttl_s=10, now=NOW)
    assert lease is not None
    state = scenario.fold_batch(state, rest)
    await backend.events.append(rest, lease="allocator", epoch=lease.epoch, state=state)
