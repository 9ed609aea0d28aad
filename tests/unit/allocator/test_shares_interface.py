"""The share interface: SetShare/RemoveShare, ShareSet/ShareRemoved, the new event fields, validation,
the projection's shares and per-share usage, and snapshots/digests that carry them
(docs/allocation.md "Fair share")."""

from __future__ import annotations

import msgspec
import pytest

from events import codec
from events import decisions as ev
from events import intents as it
from events.values import PoolConfig, ShareAmount, SharePool, ShareSpec
from services.allocator.domain import ClusterState, digest, evolve
from services.allocator.domain.model import ShareUsage
from services.allocator.domain.state import decode_snapshot, encode_snapshot
from tests.unit.allocator.builders import T0, Cluster, Gi, a_gpu, a_request, a_share, res, tf


def _cluster() -> Cluster:
    c = Cluster()
    c.node("node-1", "test-pool", *(a_gpu(f"gpu-{i}", 100, 40 * Gi) for i in range(4)))
    return c


def _rejection(events: list[ev.AnyEvent]) -> ev.IntentRejected:
    assert len(events) == 1 and isinstance(events[0], ev.IntentRejected), events
    return events[0]


SPEC = ShareSpec(namespaces=("team-a", "team-b"), weight=3, pools=(
    SharePool(pool="test-pool", guaranteed=ShareAmount(gpus=2, milli_tflops=tf(150)),
              borrowing_limit=ShareAmount(gpus=1), lending_limit=ShareAmount(gpus=1)),))


def test_share_intents_and_events_round_trip_through_the_codec() -> None:
    messages: list[msgspec.Struct] = [
        it.SetShare(intent_id="i1", name="research", spec=SPEC),
        it.RemoveShare(intent_id="i2", name="research"),
    ]
    for intent in messages:
        assert codec.decode_intent(codec.encode(intent)) == intent
    events: list[ev.AnyEvent] = [
        ev.ShareSet(at=T0, name="research", spec=SPEC),
        ev.ShareRemoved(at=T0, name="research"),
        ev.AllocationGranted(at=T0, spec=a_request("a", 10), node="n", gpus=("g",), charges=(res(10),),
                             share="research", borrowed=True),
        ev.AllocationPreempted(at=T0, allocation_id="a", namespace="ns", pod="p", pool="test-pool", node="n",
                               gpus=("g",), preemptor="b", preemptor_namespace="ns2", preemptor_pod="q", priority=0,
                               preemptor_priority=0, reason="reclaimed", reclaim=True),
        ev.PoolConfigured(at=T0, pool="test-pool", config=PoolConfig(fair_share_half_life_s=600,
                                                                     reclaim_min_runtime_s=30,
                                                                     reclaim_max_per_minute=5)),
    ]
    for event in events:
        assert codec.decode_event(codec.encode(event)) == event


def test_the_new_fields_are_omitted_at_their_defaults_so_old_events_encode_byte_identically() -> None:
    grant = ev.AllocationGranted(at=T0, spec=a_request("a", 10), node="n", gpus=("g",), charges=(res(10),))
    data = codec.encode(grant)
    assert b"share" not in data and b"borrowed" not in data
    preempted = ev.AllocationPreempted(at=T0, allocation_id="a", namespace="ns", pod="p", pool="p", node="n",
                                       gpus=("g",), preemptor="b", preemptor_namespace="ns", preemptor_pod="q",
                                       priority=0, preemptor_priority=1)
    assert b"reclaim" not in codec.encode(preempted)
    assert codec.encode(PoolConfig()) == b"{}"
    old = b'{"type":"pool_configured","at":"2026-01-01T00:00:00Z","pool":"p","config":{"placement":"compact-first"}}'
    decoded = codec.decode_event(old)
    assert isinstance(decoded, ev.PoolConfigured)
    assert decoded.config.reclaim_max_per_minute == 0 and decoded.config.fair_share_half_life_s == 0


@pytest.mark.parametrize("payload, field", [
    (b'{"type":"set_share","intent_id":"i","name":"s","spec":{"weight":0}}', "weight"),
    (b'{"type":"set_share","intent_id":"i","name":"s","spec":{"weight":1001}}', "weight"),
    (b'{"type":"set_share","intent_id":"i","name":"s","spec":{"pools":[{"pool":"p","guaranteed":{"gpus":"2"}}]}}',
     "gpus"),
    (b'{"type":"set_share","intent_id":"i","spec":{}}', "name"),
])
def test_the_decoder_refuses_out_of_bounds_shares_naming_the_field(payload: bytes, field: str) -> None:
    with pytest.raises(codec.DecodeError) as raised:
        codec.decode_intent(payload)
    assert field in str(raised.value)


def test_share_set_and_removed_fold_into_the_state_and_its_lookups() -> None:
    c = _cluster()
    out = c.share("research", SPEC)
    assert out == [ev.ShareSet(at=T0, name="research", spec=SPEC)]
    assert c.state.shares == {"research": SPEC}
    index = c.state.share_index
    assert index.leaf_of("team-a") == "research" and index.leaf_of("other") == ""
    assert index.has_shares("test-pool") and not index.has_shares("other-pool")
    assert index.terms_of("research", "test-pool").guaranteed.gpus == 2
    assert index.terms_of("research", "other-pool").guaranteed == ShareAmount()
    assert c.remove_share("research") == [ev.ShareRemoved(at=T0, name="research")]
    assert c.state.shares == {} and not c.state.share_index
    assert c.replayed_digest() == digest(c.state)


def test_usage_per_share_follows_grants_releases_resizes_and_share_changes_exactly() -> None:
    c = _cluster()
    c.request(a_request("before", 10, Gi, ns="team-a"))  # granted before the share exists
    c.share("research", SPEC)
    index = c.state.share_index
    assert index.usage_of("research", "test-pool") == ShareUsage(milli_tflops=tf(10), vram_bytes=Gi, gpus=1)
    c.request(a_request("two", 20, 2 * Gi, count=2, ns="team-b"))
    c.request(a_request("loner", 5, Gi, ns="elsewhere"))
    assert index.usage_of("research", "test-pool") == ShareUsage(milli_tflops=tf(50), vram_bytes=5 * Gi, gpus=3)
    assert index.usage_of("", "test-pool") == ShareUsage(milli_tflops=tf(5), vram_bytes=Gi, gpus=1)
    c.resize("two", res(30, 2 * Gi), res(30, 2 * Gi))
    assert index.usage_of("research", "test-pool").milli_tflops == tf(70)
    c.release("before")
    assert index.usage_of("research", "test-pool") == ShareUsage(milli_tflops=tf(60), vram_bytes=4 * Gi, gpus=2)
    c.share("research", msgspec.structs.replace(SPEC, namespaces=("team-a",)))  # team-b leaves the share
    assert index.usage_of("research", "test-pool") == ShareUsage()
    assert index.usage_of("", "test-pool").gpus == 3
    c.release("two")
    c.release("loner")
    assert index.usage == {}
    assert c.replayed_digest() == digest(c.state)


def test_a_parent_sums_its_children_usage() -> None:
    c = _cluster()
    c.share("dept", ShareSpec(pools=(SharePool(pool="test-pool", guaranteed=ShareAmount(gpus=4)),)))
    c.share("team-a", a_share("ns-a", gpus=2, parent="dept"))
    c.share("team-b", a_share("ns-b", gpus=1, parent="dept"))
    c.request(a_request("a", 10, Gi, ns="ns-a"))
    c.request(a_request("b", 10, Gi, count=2, ns="ns-b"))
    index = c.state.share_index
    assert index.usage_of("dept", "test-pool").gpus == 3
    assert index.usage_of("team-a", "test-pool").gpus == 1 and index.usage_of("team-b", "test-pool").gpus == 2


def test_snapshot_and_digest_carry_shares_and_rebuild_the_usage() -> None:
    c = _cluster()
    c.share("research", SPEC)
    c.request(a_request("a", 10, Gi, ns="team-a"))
    loaded = decode_snapshot(encode_snapshot(c.state))
    assert loaded.shares == c.state.shares
    assert loaded.share_index.usage == c.state.share_index.usage
    assert loaded.share_index.of == c.state.share_index.of
    assert digest(loaded) == digest(c.state)
    without = ClusterState.empty()
    for event in c.events:
        if not isinstance(event, ev.ShareSet):
            evolve(without, event)
    assert digest(without) != digest(c.state)


def _set(c: Cluster, name: str, spec: ShareSpec) -> ev.IntentRejected:
    return _rejection(c.share(name, spec))


def test_validation_refuses_bad_names_namespaces_pools_and_amounts() -> None:
    c = _cluster()
    c.share("a", a_share("ns-1"))
    for name, spec, field, value in [
        ("Bad_Name", ShareSpec(), "name", "Bad_Name"),
        ("b", ShareSpec(namespaces=("Team_B",)), "spec.namespaces", "Team_B"),
        ("b", ShareSpec(namespaces=("ns-2", "ns-2")), "spec.namespaces", "ns-2"),
        ("b", ShareSpec(namespaces=("ns-1",)), "spec.namespaces", "ns-1"),
        ("b", ShareSpec(pools=(SharePool(pool="Bad/Pool"),)), "spec.pools[0].pool", "Bad/Pool"),
        ("b", ShareSpec(pools=(SharePool(pool="p"), SharePool(pool="p"))), "spec.pools[1].pool", "p"),
        ("b", ShareSpec(pools=(SharePool(pool="p", guaranteed=ShareAmount(gpus=-1)),)),
         "spec.pools[0].guaranteed.gpus", "-1"),
        ("b", ShareSpec(pools=(SharePool(pool="p", borrowing_limit=ShareAmount(milli_tflops=-5)),)),
         "spec.pools[0].borrowing_limit.milli_tflops", "-5"),
        ("b", ShareSpec(pools=(SharePool(pool="p", guaranteed=ShareAmount(gpus=1),
                                         lending_limit=ShareAmount(gpus=2)),)),
         "spec.pools[0].lending_limit.gpus", "2"),
    ]:
        rejected = _set(c, name, spec)
        assert (rejected.field, rejected.value, rejected.intent_type) == (field, value, "set_share"), rejected
        assert value in rejected.reason or field in rejected.reason
    assert set(c.state.shares) == {"a"}
    c.share("a", a_share("ns-1", "ns-2"))  # replacing a share may keep its own namespaces
    assert c.state.share_index.leaf_of("ns-2") == "a"


def test_validation_of_nesting_one_level_guarantees_within_the_parent() -> None:
    c = _cluster()
    dept = ShareSpec(pools=(SharePool(pool="test-pool", guaranteed=ShareAmount(gpus=2)),))
    assert _set(c, "team", a_share("ns-1", parent="dept")).field == "spec.parent"  # no such parent
    c.share("dept", dept)
    c.share("leafy", a_share("ns-9"))
    assert "namespaces" in _set(c, "team", a_share("ns-1", parent="leafy")).reason
    assert _set(c, "team", a_share("ns-1", parent="team")).field == "spec.parent"
    over = _set(c, "team", a_share("ns-1", gpus=3, parent="dept"))
    assert (over.field, over.value) == ("spec.pools[0].guaranteed.gpus", "3")
    other_pool = _set(c, "team", a_share("ns-1", pool="other", gpus=1, parent="dept"))
    assert other_pool.field == "spec.pools[0].guaranteed.gpus"
    c.share("team", a_share("ns-1", gpus=2, parent="dept"))
    assert "has namespaces" in _set(c, "sub", a_share("ns-2", parent="team")).reason
    c.share("mid", ShareSpec(parent="dept"))
    assert "one level" in _set(c, "sub", a_share("ns-2", parent="mid")).reason
    c.remove_share("mid")
    shrink = _set(c, "dept", ShareSpec(pools=(SharePool(pool="test-pool", guaranteed=ShareAmount(gpus=1)),)))
    assert (shrink.field, shrink.value) == ("spec.pools[0].guaranteed.gpus", "1") and "team" in shrink.reason
    assert _set(c, "dept", msgspec.structs.replace(dept, namespaces=("ns-5",))).field == "spec.namespaces"
    assert _set(c, "dept", msgspec.structs.replace(dept, parent="leafy")).field == "spec.parent"
    removal = _rejection(c.remove_share("dept"))
    assert (removal.field, removal.value, removal.intent_type) == ("name", "dept", "remove_share")
    assert "team" in removal.reason
    unknown = _rejection(c.remove_share("nobody"))
    assert (unknown.field, unknown.value) == ("name", "nobody")
    c.remove_share("team")
    c.remove_share("dept")
    assert set(c.state.shares) == {"leafy"}


def test_configure_pool_refuses_negative_reclaim_settings() -> None:
    c = _cluster()
    rejected = _rejection(c.pool("test-pool", reclaim_min_runtime_s=-1))
    assert (rejected.field, rejected.value) == ("config.reclaim_min_runtime_s", "-1")
