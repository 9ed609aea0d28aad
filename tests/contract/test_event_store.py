"""EventStore contract: gapless positions, fencing, exactly-once intents, reads, corruption, snapshots,
read models. Every test runs against the in-memory twin and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from events import codec
from events import decisions as ev
from events.values import PoolConfig
from services.allocator.adapters import allocation_table, projection
from services.allocator.domain import state as state_module
from services.allocator.domain.state import ClusterState, decode_snapshot, digest, encode_snapshot
from services.allocator.ports import (
    CorruptEventError,
    DecidedIntent,
    DuplicateIntentError,
    FencedError,
    StoredEvent,
)
from tests.contract import scenario
from tests.contract.conftest import Backend

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


async def _leader(backend: Backend, holder: str = "a") -> int:
    lease = await backend.leases.acquire("allocator", holder=holder, ttl_s=10, now=NOW)
    assert lease is not None
    return int(lease.epoch)


async def _append_story(backend: Backend, epoch: int, batches: list[list[DecidedIntent]]) -> ClusterState:
    state = ClusterState.empty()
    for batch in batches:
        state = scenario.fold_batch(state, batch)
        stored = await backend.events.append(batch, lease="allocator", epoch=epoch, state=state)
        if stored:
            state.position = stored[-1].position
    return state


async def _all(backend: Backend, **kwargs: int) -> list[StoredEvent]:
    return [s async for s in backend.events.read(**kwargs)]


async def test_positions_are_gapless_from_one_and_read_back_in_order(backend: Backend) -> None:
    epoch = await _leader(backend)
    story = scenario.story()
    await _append_story(backend, epoch, [story[:3], story[3:]])
    stored = await _all(backend)
    expected = [e for d in story for e in d.events]
    assert [s.position for s in stored] == list(range(1, len(expected) + 1))
    assert [s.event for s in stored] == expected
    assert [s.intent_id for s in stored] == [d.intent_id for d in story for _ in d.events]
    assert {s.epoch for s in stored} == {epoch}
    assert await backend.events.last_position() == len(expected)


async def test_read_after_and_limit_page_through_the_log(backend: Backend) -> None:
    epoch = await _leader(backend)
    await _append_story(backend, epoch, [scenario.story()])
    total = await backend.events.last_position()
    window = await _all(backend, after=3, limit=4)
    assert [s.position for s in window] == [4, 5, 6, 7]
    assert await _all(backend, after=total) == []
    assert len(await _all(backend, after=total - 2, limit=100)) == 2


async def test_processed_reports_every_appended_intent_even_without_events(backend: Backend) -> None:
    epoch = await _leader(backend)
    batch = [DecidedIntent(intent_id="x", stream_seq=7, events=()), *scenario.story()[:1]]
    await backend.events.append(batch, lease="allocator", epoch=epoch, state=ClusterState.empty())
    assert await backend.events.processed(["x", "intent-0", "never"]) == {"x", "intent-0"}
    assert await backend.events.last_position() == 2


async def test_stale_epoch_is_fenced_and_writes_nothing(backend: Backend) -> None:
    epoch = await _leader(backend, "a")
    await _append_story(backend, epoch, [scenario.story()[:1]])
    before = await backend.events.read_models()
    later = NOW + timedelta(seconds=11)
    taken = await backend.leases.acquire("allocator", holder="b", ttl_s=10, now=later)
    assert taken is not None and taken.epoch == epoch + 1
    with pytest.raises(FencedError):
        await backend.events.append(scenario.story()[1:3], lease="allocator", epoch=epoch, state=ClusterState.empty())
    assert await backend.events.last_position() == 2
    assert await backend.events.processed(["intent-1", "intent-2"]) == set()
    assert await backend.events.read_models() == before
    await backend.events.append(scenario.story()[1:2], lease="allocator", epoch=taken.epoch,
                                state=ClusterState.empty())
    assert await backend.events.last_position() == 3


async def test_append_without_a_lease_is_fenced(backend: Backend) -> None:
    with pytest.raises(FencedError):
        await backend.events.append(scenario.story()[:1], lease="allocator", epoch=1, state=ClusterState.empty())
    assert await backend.events.last_position() == 0


@pytest.mark.parametrize("twice_in_batch", [False, True])
async def test_duplicate_intent_is_refused_and_writes_nothing(backend: Backend, twice_in_batch: bool) -> None:
    epoch = await _leader(backend)
    story = scenario.story()
    await _append_story(backend, epoch, [story[:1]])
    batch = [story[1], story[1]] if twice_in_batch else [story[1], story[0]]
    with pytest.raises(DuplicateIntentError):
        await backend.events.append(batch, lease="allocator", epoch=epoch, state=ClusterState.empty())
    assert await backend.events.last_position() == 2
    assert await backend.events.processed(["intent-1"]) == set()


async def test_undecodable_event_stops_the_read_naming_position_and_type(backend: Backend) -> None:
    epoch = await _leader(backend)
    await _append_story(backend, epoch, [scenario.story()[:3]])
    await backend.put_raw(3, "quota_set", '{"type": "quota_set", "at": "not a time"}')
    seen: list[int] = []
    with pytest.raises(CorruptEventError, match=r"position 3 \(type 'quota_set'\)"):
        async for stored in backend.events.read():
            seen.append(stored.position)
    assert seen == [1, 2]
    with pytest.raises(CorruptEventError):
        await backend.events.load_state()


async def test_a_payload_of_an_older_schema_version_is_upcast(backend: Backend) -> None:
    epoch = await _leader(backend)
    await _append_story(backend, epoch, [scenario.story()[:3]])
    grant = (await _all(backend, after=3, limit=1))[0].event
    old = codec.to_builtins(grant)
    old.update(schema_version=0, gpu_names=old.pop("gpus"))
    del old["charges"]
    await backend.put_raw(4, "allocation_granted", msgspec.json.encode(old).decode())
    upcast = (await _all(backend, after=3, limit=1))[0].event
    assert isinstance(upcast, ev.AllocationGranted)
    assert upcast.gpus == grant.gpus and upcast.charges == (grant.spec.request,)


async def test_load_state_is_newest_snapshot_plus_tail_and_equals_a_full_replay(backend: Backend) -> None:
    epoch = await _leader(backend)
    story = scenario.story()
    assert digest(await backend.events.load_state()) == digest(ClusterState.empty())
    state = await _append_story(backend, epoch, [story[:4]])
    await backend.events.save_snapshot(state)
    state = await _append_story_from(backend, epoch, state, story[4:])
    loaded = await backend.events.load_state()
    assert loaded.position == state.position == await backend.events.last_position()
    assert digest(loaded) == digest(state)
    latest = await backend.events.latest_snapshot()
    assert latest is not None and latest[0] == 5


@pytest.mark.parametrize("stale", [True, False])
async def test_a_snapshot_of_other_projection_rules_is_not_resumed_from(
        backend: Backend, stale: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot written under another PROJECTION_VERSION holds what older rules folded: loading
    rebuilds from the log instead. The snapshot saved here is tampered (a pool the log never
    configured), so resuming from it shows; with the current version it is resumed from (the control)."""
    epoch = await _leader(backend)
    story = scenario.story()
    state = await _append_story(backend, epoch, [story[:4]])
    tampered = decode_snapshot(encode_snapshot(state))
    tampered.pools["ghost"] = PoolConfig()
    with monkeypatch.context() as patch:
        if stale:
            patch.setattr(state_module, "PROJECTION_VERSION", state_module.PROJECTION_VERSION - 1)
        await backend.events.save_snapshot(tampered)
    loaded = await backend.events.load_state()
    assert ("ghost" in loaded.pools) is not stale
    if stale:
        assert digest(loaded) == digest(state) and loaded.position == state.position


async def _append_story_from(backend: Backend, epoch: int, state: ClusterState,
                             batch: list[DecidedIntent]) -> ClusterState:
    state = scenario.fold_batch(state, batch)
    stored = await backend.events.append(batch, lease="allocator", epoch=epoch, state=state)
    state.position = stored[-1].position
    return state


@pytest.mark.parametrize("batch_size", [1, 3, 9])
async def test_read_models_equal_a_rebuild_whatever_the_batching(backend: Backend, batch_size: int) -> None:
    epoch = await _leader(backend)
    story = scenario.story()
    state = await _append_story(backend, epoch, [story[i:i + batch_size] for i in range(0, len(story), batch_size)])
    models = await backend.events.read_models()
    assert models.allocations == allocation_table.project_all(await _all(backend)).sorted_rows()
    assert models.gpus == projection.gpu_rows(state)
    assert models.quota_usage == projection.quota_rows(state)
    by_alloc = {(r["allocation_id"], r["status"]) for r in models.allocations}
    assert by_alloc == {("a", "granted"), ("b", "released"), ("c", "granted"), ("big", "rejected"),
                        ("d", "released")}
    a = next(r for r in models.allocations if r["allocation_id"] == "a")
    assert (a["resize_count"], a["request_milli_tflops"], a["gpus"]) == (1, 50_000, ["n1-gpu0"])
    c = next(r for r in models.allocations if r["allocation_id"] == "c")
    assert c["from_queue"] and c["queued_at"] == scenario.at(4) and c["granted_at"] == scenario.at(30)
    gpu = next(r for r in models.gpus if r["name"] == "n2-gpu0")
    assert gpu["used_milli_tflops"] == 300_000 and gpu["available_milli_tflops"] == 12_000


async def test_a_rejected_intent_echoing_a_nul_character_is_stored(backend: Backend) -> None:
    epoch = await _leader(backend)
    rejected = ev.IntentRejected(at=NOW, intent_id="bad", reason="malformed intent payload", raw='{"x": "a\x00b"}')
    await backend.events.append([DecidedIntent(intent_id="bad", stream_seq=1, events=(rejected,))],
                                lease="allocator", epoch=epoch, state=ClusterState.empty())
    (stored,) = await _all(backend)
    assert stored.event.raw == '{"x": "a\ufffdb"}'
    assert msgspec.structs.replace(stored.event, raw=rejected.raw) == rejected


async def test_relay_position_is_absent_until_recorded_then_the_last_record(backend: Backend) -> None:
    assert await backend.events.relay_position("events") is None
    await backend.events.save_relay_position("events", 7)
    await backend.events.save_relay_position("other", 1)
    assert await backend.events.relay_position("events") == 7
    await backend.events.save_relay_position("events", 0)  # starting over for a new stream
    assert await backend.events.relay_position("events") == 0
    assert await backend.events.relay_position("other") == 1
