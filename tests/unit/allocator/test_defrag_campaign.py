"""Executing a consolidation plan: a defrag campaign (services/allocator/domain/defrag_campaign.py).

Hypothesis: on clusters filled and thinned by random requests, a started campaign's reservations
never over-commit a GPU or a node and never include a protected allocation or part of a gang;
executed step by step (each move's replacement request, then the source's release, or a refused
eviction) in a random order and interrupted at any step, the log replayed (and a snapshot
round-trip) equals the live state; once every move closes the state holds no reservation; the end
state after every replacement equals the plan's predicted one; a deadline passed frees everything.
Worked examples check the events, a refused eviction, cancellation, and the rules' refusals.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from events import decisions as ev
from events import intents as it
from events.values import PLACEMENT_STRATEGIES, AllocationSpec, DefragSchedule, GangSpec
from services.allocator.adapters.projection import gpu_rows_named, touched
from services.allocator.api.lives import describe
from services.allocator.api.whatif.intents import Descriptions, reconstruct
from services.allocator.domain import ClusterState, Scheduler, decode_snapshot, digest, encode_snapshot, evolve
from services.allocator.domain.consolidation import Budget, planned
from services.allocator.domain.defrag_campaign import scheduled
from services.allocator.domain.defrag_fold import HOLD_PREFIX
from services.allocator.domain.defrag_schedule import check_schedule
from services.allocator.domain.model import GRANTED
from services.allocator.domain.victims import PROTECTION_KEY
from services.allocator.ports import StoredEvent
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request, tf, three_half_used_nodes


def _start(c: Cluster, pool: str = "p", **kw: object) -> list[ev.AnyEvent]:
    return c.send(it.StartDefrag(intent_id=f"campaign-{len(c.events)}", pool=pool, **kw))  # type: ignore[arg-type]


def _replacement(spec: AllocationSpec) -> AllocationSpec:
    return msgspec.structs.replace(spec, allocation_id=spec.allocation_id + "-r", pod=spec.pod + "-r")


def _holds(state: ClusterState) -> dict[str, tuple[int, int]]:
    """Per GPU, what is used beyond its allocations' charges (the reservations' holds)."""
    out = {}
    for name, gpu in state.gpus.items():
        extra = (gpu.used_milli_tflops - sum(ch.milli_tflops for ch in gpu.charges.values()),
                 gpu.used_vram_bytes - sum(ch.vram_bytes for ch in gpu.charges.values()))
        if extra != (0, 0):
            out[name] = extra
    return out


def _no_hold_left(state: ClusterState) -> None:
    assert _holds(state) == {}
    for gpu in state.gpus.values():
        assert not any(k.startswith(HOLD_PREFIX) for k in gpu.partitions)
    for node in state.nodes.values():
        workers = [state.allocations[a] for a in node.workers]
        assert node.used_cpu_milli == sum(a.spec.cpu_milli for a in workers)
        assert node.used_memory_bytes == sum(a.spec.memory_bytes for a in workers)


def _replayed_equals_live(c: Cluster) -> None:
    assert c.replayed_digest() == digest(c.state)
    assert digest(decode_snapshot(encode_snapshot(c.state))) == digest(c.state)


def _never_overcommitted(state: ClusterState) -> None:
    for gpu in state.gpus.values():
        assert not gpu.overcommitted
    for node in state.nodes.values():
        assert node.used_cpu_milli <= node.cpu_milli and node.used_memory_bytes <= node.memory_bytes


asks = st.lists(st.tuples(st.sampled_from([10, 20, 25, 40, 60]), st.sampled_from([1, 1, 1, 2]),
                          st.sampled_from(["low", "medium", "high"])), min_size=3, max_size=9)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(asks=asks, nodes=st.integers(3, 5), releases=st.sets(st.integers(0, 8), max_size=4),
       protected=st.sets(st.integers(0, 8), max_size=1), gangs=st.sampled_from([0, 0, 1]),
       max_moves=st.sampled_from([1, 3, 8, 8]),
       fill=st.sampled_from(["low-load-first"] * 3 + list(PLACEMENT_STRATEGIES)), data=st.data())
def test_a_campaign_reserves_safely_and_replays_at_every_step(
        asks: list[tuple[int, int, str]], nodes: int, releases: set[int], protected: set[int], gangs: int,
        max_moves: int, fill: str, data: st.DataObject) -> None:
    c = Cluster()
    for n in range(nodes):
        c.node(f"n{n}", "p", *(a_gpu(f"n{n}-g{g}", 100, 16 * Gi, index=g) for g in range(2)),
               cpu_milli=16_000, memory_bytes=64 * Gi)
    c.pool("p", placement=fill)
    for g in range(gangs):
        key = GangSpec(key=f"ns-a/g{g}", quorum=2, desired=2)
        for m in range(2):
            c.request(a_request(f"g{g}-{m}", 10, Gi, pool="p", ns="ns-a", gang=key, workload=f"gang{g}-{m}"))
    for i, (tflops, count, qos) in enumerate(asks):
        attributes = {PROTECTION_KEY: "1h"} if i in protected else {}
        c.request(a_request(f"a{i}", tflops, Gi, count=count, pool="p", qos=qos, ns="ns-a", workload=f"w{i}",
                            attributes=attributes, cpu_milli=1000, memory_bytes=Gi))
    for i in sorted(releases):
        c.release(f"a{i}")
    c.pool("p", placement="node-compact-gpu-low-load")
    assume(not len(c.state.queue))  # a queued request would take what a release frees: not the plan's prediction
    c.tick(60)
    result, predicted = planned(c.state, "p", Budget(max_moves=max_moves), c.now, Scheduler())
    live = {a.spec.allocation_id: a for a in c.state.allocations.values() if a.status == GRANTED}

    started = _start(c, max_moves=max_moves)
    reserved = [e for e in started if isinstance(e, ev.MoveReserved)]
    assert [(m.allocation_id, m.target_node, m.target_gpus) for m in result.moves] == [
        (r.allocation_id, r.target_node, r.target_gpus) for r in reserved]
    _never_overcommitted(c.state)
    for r in reserved:
        assert not live[r.allocation_id].spec.attributes.get(PROTECTION_KEY)
        assert live[r.allocation_id].spec.gang is None or all(
            a in {x.allocation_id for x in reserved} for a, x in live.items()
            if x.spec.gang == live[r.allocation_id].spec.gang)
    _replayed_equals_live(c)

    intruder = data.draw(st.sampled_from([0, 0, 25, 60, 100]))
    if intruder:  # another workload's request while the targets are held: it never lands on a hold
        c.request(a_request("intruder", intruder, Gi, pool="p", ns="ns-b", workload="intruder"))
        _never_overcommitted(c.state)
        _replayed_equals_live(c)
    refused = data.draw(st.sets(st.sampled_from([r.allocation_id for r in reserved]), max_size=2)
                        if reserved else st.just(set()))
    order = data.draw(st.permutations(reserved))
    cid = started[0].campaign_id  # type: ignore[union-attr]
    for r in order:
        if r.allocation_id in refused:
            out = c.send(it.CancelMove(intent_id=f"refused-{r.allocation_id}", campaign_id=cid,
                                       allocation_id=r.allocation_id, pool="p", code="eviction_refused"))
            assert isinstance(out[0], ev.MoveCancelled) and out[0].code == "eviction_refused"
        else:
            out = c.request(_replacement(live[r.allocation_id].spec))  # type: ignore[assignment]
            granted = [e for e in c.events[-3:] if isinstance(e, ev.AllocationGranted)]
            assert granted and granted[-1].node == r.target_node and granted[-1].gpus == r.target_gpus
            c.release(r.allocation_id)
        _never_overcommitted(c.state)
        _replayed_equals_live(c)  # interrupted here: the log rebuilds exactly this state
    _no_hold_left(c.state)
    campaign = c.state.campaigns["p"]
    assert not campaign.running and campaign.end_code == "done"
    assert campaign.completed == len(reserved) - len(refused) and campaign.cancelled == len(refused)
    if not refused and not intruder:
        used = {n: (g.used_milli_tflops, g.used_vram_bytes) for n, g in c.state.gpus.items()}
        assert used == {n: (g.used_milli_tflops, g.used_vram_bytes) for n, g in predicted.gpus.items()}
        for name in result.nodes_emptied:
            assert not c.state.nodes[name].workers and c.state.nodes[name].idle_since == c.now


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.integers(0, 3), late=st.booleans())
def test_an_interrupted_campaign_frees_every_hold_at_its_deadline(steps: int, late: bool) -> None:
    c = three_half_used_nodes()
    started = _start(c, max_duration_s=300)
    reserved = [e for e in started if isinstance(e, ev.MoveReserved)]
    assert len(reserved) == 2 and _holds(c.state)
    for r in reserved[:steps]:  # then the writer crashes: nothing more arrives for the campaign
        c.request(_replacement(c.state.allocations[r.allocation_id].spec))
    recovered = ClusterState.empty()
    for e in c.events:
        evolve(recovered, e)
    assert digest(recovered) == digest(c.state)
    c.tick(299)
    assert c.send(it.CheckHeartbeats(intent_id="early"))[1:] == []  # nothing due yet
    c.tick(1 if not late else 3600)
    out = c.send(it.CheckHeartbeats(intent_id="tick"))
    open_moves = max(0, len(reserved) - steps)
    assert [type(e) for e in out[1:]] == [ev.MoveCancelled] * open_moves + ([ev.DefragEnded] if open_moves else [])
    _no_hold_left(c.state)
    assert not c.state.campaigns["p"].running
    _replayed_equals_live(c)


def test_a_campaign_records_its_plan_and_the_replacement_takes_the_reserved_gpus() -> None:
    c = three_half_used_nodes()
    out = _start(c, max_moves=5, trigger="cli")
    started, first, second = out
    assert isinstance(started, ev.DefragStarted) and started.moves == 2 and started.nodes == ("n0", "n2")
    assert started.deadline == c.now + timedelta(seconds=600) and started.trigger == "cli"
    assert isinstance(first, ev.MoveReserved) and first.allocation_id == "a0" and first.workload == "w0"
    target = c.state.gpus[first.target_gpus[0]]
    assert target.charges == {} and target.used_milli_tflops == tf(30)  # held for a0, no allocation's charge
    assert c.avail(first.target_gpus[0]) == (tf(70), 15 * Gi)  # nothing else can take the held capacity
    moved = c.send(it.RequestAllocation(intent_id="r", spec=_replacement(c.state.allocations["a0"].spec)))
    assert [type(e) for e in moved] == [ev.MoveCompleted, ev.AllocationGranted]
    assert describe(first).startswith(f"defrag campaign {started.campaign_id}: n1 (n1-g1) reserved for its replacement")
    assert describe(moved[0]).endswith("replacement a0-r (a0-r) granted the reserved GPUs n1-g1 on n1")
    assert moved[1].gpus == first.target_gpus  # type: ignore[union-attr]
    assert target.used_milli_tflops == tf(30) and list(target.charges) == ["a0-r"]  # the hold became the grant
    c.release("a0")
    assert c.state.nodes["n0"].idle_since == c.now  # the emptied node shows idle
    other = a_request("x", 30, Gi, pool="p", workload="another")
    assert [type(e) for e in c.send(it.RequestAllocation(intent_id="x", spec=other))] == [ev.AllocationGranted]
    assert isinstance(second, ev.MoveReserved) and second.allocation_id == "a2"
    assert isinstance(c.request(_replacement(c.state.allocations["a2"].spec)), ev.MoveCompleted)
    campaign = c.state.campaigns["p"]
    assert not campaign.running and campaign.completed == 2 and campaign.end_code == "done"


def test_a_refused_eviction_frees_its_reservation_and_cancel_ends_the_campaign() -> None:
    c = three_half_used_nodes()
    started = _start(c)
    cid = started[0].campaign_id  # type: ignore[union-attr]
    before = _holds(c.state)
    assert len(before) == 2
    out = c.send(it.CancelMove(intent_id="pdb", campaign_id=cid, allocation_id="a0", pool="p",
                               reason="Cannot evict pod as it would violate the pod's disruption budget."))
    assert [type(e) for e in out] == [ev.MoveCancelled]
    assert len(_holds(c.state)) == 1 and c.state.campaigns["p"].running
    again = c.send(it.CancelMove(intent_id="pdb-2", campaign_id=cid, allocation_id="a0", pool="p"))
    assert isinstance(again[0], ev.IntentRejected) and again[0].field == "allocation_id"
    # a replacement of the cancelled move is an ordinary request
    assert not isinstance(c.send(it.RequestAllocation(intent_id="r0", spec=_replacement(
        c.state.allocations["a0"].spec)))[0], ev.MoveCompleted)
    out = c.send(it.CancelDefrag(intent_id="stop", pool="p", reason="operator"))
    assert [type(e) for e in out] == [ev.MoveCancelled, ev.DefragEnded]
    assert out[-1].code == "cancelled"  # type: ignore[union-attr]
    _no_hold_left(c.state)
    _replayed_equals_live(c)


def test_refusals_name_the_field() -> None:
    c = three_half_used_nodes()
    assert _start(c, pool="nowhere")[0].field == "pool"  # type: ignore[union-attr]
    assert _start(c, pool="Bad_Pool")[0].field == "pool"  # type: ignore[union-attr]
    _start(c)
    busy = _start(c)[0]
    assert isinstance(busy, ev.IntentRejected) and "is running in pool p" in busy.reason
    none = c.send(it.CancelDefrag(intent_id="c", pool="q"))[0]
    assert isinstance(none, ev.IntentRejected) and none.field == "pool"
    bad = c.send(it.CancelMove(intent_id="m", campaign_id="x", allocation_id="a0", code="whatever"))[0]
    assert isinstance(bad, ev.IntentRejected) and bad.field == "code"
    unknown = c.send(it.CancelMove(intent_id="m2", campaign_id="x", allocation_id="a0"))[0]
    assert isinstance(unknown, ev.IntentRejected) and unknown.field == "campaign_id"


def test_a_plan_without_moves_starts_and_ends_at_once() -> None:
    c = Cluster()
    c.node("n0", "p", a_gpu("n0-g0", 100, 16 * Gi))
    c.request(a_request("only", 30, Gi, pool="p", workload="w"))
    out = _start(c)
    assert [type(e) for e in out] == [ev.DefragStarted, ev.DefragEnded]
    assert out[1].reason.startswith("nothing to move")  # type: ignore[union-attr]
    assert not c.state.campaigns["p"].running
    assert isinstance(_start(c)[0], ev.DefragStarted)  # an ended campaign does not block the next


def test_a_due_schedule_starts_one_campaign_per_tick_within_its_window() -> None:
    c = three_half_used_nodes()
    c.pool("p", placement="node-compact-gpu-low-load",
           defrag=DefragSchedule(schedule="0 3 * * *", timezone="Europe/Paris", max_duration_s=3600, max_moves=5))
    c.now = datetime(2026, 1, 2, 1, 59, tzinfo=UTC)  # 02:59 in Paris: not yet
    assert scheduled(c.state, c.now) == []
    c.now = datetime(2026, 1, 2, 2, 0, 30, tzinfo=UTC)  # 03:00:30 in Paris
    (start,) = scheduled(c.state, c.now)
    assert (start.pool, start.trigger, start.max_moves, start.max_duration_s) == ("p", "schedule", 5, 3570)
    assert start.intent_id == "defrag-schedule-p-20260102T020000Z"
    assert isinstance(c.send(start)[0], ev.DefragStarted)
    assert scheduled(c.state, c.now) == []  # one runs
    c.send(it.CancelDefrag(intent_id="stop", pool="p"))
    c.tick(60)
    assert scheduled(c.state, c.now) == []  # this tick's campaign already ran
    c.now = datetime(2026, 1, 3, 1, 30, tzinfo=UTC)  # the next tick (03:00 Paris) is 30 minutes away
    assert scheduled(c.state, c.now) == []
    c.now = datetime(2026, 1, 3, 2, 10, tzinfo=UTC)  # 03:10 Paris: due again
    assert [s.intent_id for s in scheduled(c.state, c.now)] == ["defrag-schedule-p-20260103T020000Z"]
    c.now = datetime(2026, 1, 4, 3, 5, tzinfo=UTC)  # 04:05 Paris: the 03:00 tick's window (1 h) has passed
    assert scheduled(c.state, c.now) == []
    c.pool("p", defrag=DefragSchedule(schedule="0 3 * * *", max_duration_s=3600, enabled=False))
    c.now = datetime(2026, 1, 5, 3, 0, tzinfo=UTC)
    assert scheduled(c.state, c.now) == []  # disabled


def test_a_schedule_that_cannot_run_is_refused_naming_the_field() -> None:
    c = three_half_used_nodes()
    for schedule, field in ((DefragSchedule(schedule="0 3 * *"), "config.defrag.schedule"),
                            (DefragSchedule(schedule="CRON_TZ=UTC 0 3 * * *"), "config.defrag.schedule"),
                            (DefragSchedule(schedule="61 3 * * *"), "config.defrag.schedule"),
                            (DefragSchedule(schedule="0 3 * * *", timezone="Mars/Olympus"), "config.defrag.timezone"),
                            (DefragSchedule(schedule="0 3 * * *", max_duration_s=0), "config.defrag.max_duration_s"),
                            (DefragSchedule(schedule="0 3 * * *", max_moves=0), "config.defrag.max_moves")):
        refused = c.pool("p", defrag=schedule)[0]
        assert isinstance(refused, ev.IntentRejected) and refused.field == field, (schedule, refused)
    assert check_schedule(DefragSchedule(schedule="*/15 2-4 * * 1-5", timezone="Asia/Shanghai")) is None


def test_what_if_rebuilds_each_campaign_intent_from_its_events() -> None:
    c = three_half_used_nodes()
    sent: list[tuple[it.AnyIntent, list[ev.AnyEvent]]] = []

    def send(intent: it.AnyIntent) -> None:
        sent.append((intent, c.send(intent)))

    send(it.StartDefrag(intent_id="campaign-1", pool="p", max_moves=4, max_share_of_namespace_pct=67.0,
                        max_milli_tflops=tf(90), max_duration_s=900, trigger="cli"))
    send(it.RequestAllocation(intent_id="r", spec=_replacement(c.state.allocations["a0"].spec)))
    send(it.CancelMove(intent_id="pdb", campaign_id="campaign-1", allocation_id="a2", pool="p",
                       reason="Cannot evict pod as it would violate the pod's disruption budget."))
    send(it.StartDefrag(intent_id="campaign-2", pool="p", max_moves=4))
    send(it.CancelDefrag(intent_id="stop", pool="p", reason="enough"))
    known = Descriptions(c.state)
    for intent, events in sent:
        assert not isinstance(events[0], ev.IntentRejected), events
        assert reconstruct(intent.intent_id, events, known) == intent, (intent, events)


def test_the_sql_read_model_rewrites_the_gpus_a_hold_takes_or_frees() -> None:
    c = three_half_used_nodes()
    started = _start(c)
    reserved = [e for e in started if isinstance(e, ev.MoveReserved)]

    def batch(events: list[ev.AnyEvent]) -> list[StoredEvent]:
        return [StoredEvent(position=i + 1, recorded_at=c.now, epoch=1, intent_id="x", event=e)
                for i, e in enumerate(events)]

    held = touched(batch(started), c.state)
    assert {g for r in reserved for g in r.target_gpus} <= held.gpus
    rows = {r["name"]: r for r in gpu_rows_named(c.state, held.gpus)[0]}
    gpu = reserved[0].target_gpus[0]
    assert rows[gpu]["used_milli_tflops"] == c.state.gpus[gpu].used_milli_tflops == tf(30)  # the hold
    freed = touched(batch(c.send(it.CancelDefrag(intent_id="stop", pool="p"))), c.state)
    assert {r.target_node for r in reserved} <= freed.nodes


def test_members_of_one_workload_are_interchangeable_and_take_reservations_in_order() -> None:
    c = Cluster()
    c.pool("p", placement="low-load-first")
    for n in range(2):
        c.node(f"n{n}", "p", *(a_gpu(f"n{n}-g{g}", 100, 16 * Gi, index=g) for g in range(2)))
    c.request(a_request("big", 60, Gi, count=2, pool="p", workload="big"))  # both GPUs of n0
    c.request(a_request("w-1", 10, Gi, pool="p", workload="web"))  # n1
    c.request(a_request("w-2", 10, Gi, pool="p", workload="web"))  # n1, the other GPU
    c.pool("p", placement="node-compact-gpu-low-load")
    assert {c.state.allocations[a].node for a in ("w-1", "w-2")} == {"n1"}
    reserved = [e for e in _start(c) if isinstance(e, ev.MoveReserved)]
    assert sorted(r.allocation_id for r in reserved) == ["w-1", "w-2"]
    second = _replacement(c.state.allocations[reserved[1].allocation_id].spec)
    out = c.send(it.RequestAllocation(intent_id="r", spec=second))  # the second pod's replacement comes first
    assert out[0].allocation_id == reserved[0].allocation_id  # type: ignore[union-attr]  # the first open move
    assert out[1].gpus == reserved[0].target_gpus  # type: ignore[union-attr]
    other = c.send(it.CancelMove(intent_id="pdb", campaign_id=reserved[0].campaign_id,
                                 allocation_id=reserved[0].allocation_id, pool="p"))[0]
    assert isinstance(other, ev.IntentRejected) and other.field == "allocation_id"  # already completed
