"""Autoscaler cases A26-A31 and A38 through the engine, with the real allocation domain deciding resizes."""

from __future__ import annotations

from datetime import timedelta

import msgspec

from events import decisions
from services.autoscaler import checkpoint
from services.autoscaler.aggregator import WorkloadAggregator
from services.autoscaler.engine import Engine
from tests.unit.autoscaler.builders import GI, T0, raw, res, rl, spec
from tests.unit.autoscaler.world import World, autoscale_attributes, cron_rule

KEY = ("ml", "llama")


def world_with(attributes: dict[str, str], *, workers: int = 1) -> World:
    world = World()
    world.node()
    for i in range(workers):
        event = world.allocate(spec(f"a-{i}", attributes=attributes))
        assert isinstance(event, decisions.AllocationGranted), event
    return world


def current(world: World, allocation_id: str = "a-0") -> object:
    return world.engine.view.workers[allocation_id].current


def test_a26_recommendation_is_applied_and_reprocessing_changes_nothing() -> None:
    world = world_with(autoscale_attributes(cron=[cron_rule(("110", "110Gi"))]))
    sent = world.evaluate(T0 + timedelta(minutes=1))
    assert len(sent) == 1
    assert world.engine.states[KEY].recommendation == rl((110, 110), (110, 110))
    assert current(world) == rl((110, 110), (110, 110))
    resized = world.of_type(decisions.AllocationResized)
    assert [(e.request, e.limit) for e in resized] == [(res(110, 110), res(110, 110))]  # type: ignore[attr-defined]
    assert world.evaluate(T0 + timedelta(minutes=2)) == []


def test_a27_disabled_keeps_spec_and_compute_target_changes_only_tflops() -> None:
    off = world_with(autoscale_attributes(enable=False, cron=[cron_rule(("110", "110Gi"))]))
    assert off.evaluate(T0 + timedelta(minutes=1)) == []
    assert current(off) == rl((10, 8), (20, 16))
    compute = world_with(autoscale_attributes(target="compute", cron=[cron_rule(("110", "110Gi"))]))
    compute.evaluate(T0 + timedelta(minutes=1))
    # gpuledger sends the worker's own VRAM values for the non-targeted resource (upstream sends 110Gi).
    assert current(compute) == rl((110, 8), (110, 16))


def test_a28_dedicated_gpu_worker_is_left_alone() -> None:
    attrs = {**autoscale_attributes(cron=[cron_rule(("110", "110Gi"))]), "tensor-fusion.ai/dedicated-gpu": "true"}
    world = world_with(attrs)
    assert world.evaluate(T0 + timedelta(minutes=1)) == []
    assert current(world) == rl((10, 8), (20, 16))


def test_a29_over_quota_is_rejected_then_capped_retry_succeeds() -> None:
    from events.values import QuotaAmount, QuotaSpec

    world = World()
    world.node()
    world.quota("ml", QuotaSpec(total_requests=QuotaAmount(milli_tflops=50_000, vram_bytes=100 * GI)))
    world.allocate(spec("a-0", attributes=autoscale_attributes(cron=[cron_rule(("110", "20Gi"))])))
    world.evaluate(T0 + timedelta(minutes=1))
    rejected = world.of_type(decisions.ResizeRejected)
    assert len(rejected) == 1 and rejected[0].max_request.milli_tflops == 50_000  # type: ignore[attr-defined]
    assert [i.request.milli_tflops for i in world.sent] == [110_000, 50_000]
    assert current(world) == rl((50, 20), (110, 20))


def test_rejection_that_cannot_be_capped_stops_without_a_loop() -> None:
    from events.values import QuotaAmount, QuotaSpec

    world = World()
    world.node()
    world.quota("ml", QuotaSpec(total_limits=QuotaAmount(milli_tflops=30_000)))
    world.allocate(spec("a-0", attributes=autoscale_attributes(cron=[cron_rule(("15", "8Gi"), ("110", "16Gi"))])))
    world.evaluate(T0 + timedelta(minutes=1))
    assert len(world.of_type(decisions.ResizeRejected)) >= 1
    assert len(world.sent) <= 1 + world.engine.tracker.max_retries
    before = len(world.sent)
    world.evaluate(T0 + timedelta(minutes=2))  # blocked for retry_after: nothing resent
    assert len(world.sent) == before
    assert current(world) == rl((10, 8), (20, 16))
    world.evaluate(T0 + timedelta(minutes=10))  # retry_after (5 min) passed: one more try, then blocked again
    assert before < len(world.sent) <= 2 * before


def test_a30_cron_window_applies_then_reverts_to_the_spec() -> None:
    rule = cron_rule(("120", "120Gi"), start="0 0 * * *", end="0 12 * * *")
    world = world_with(autoscale_attributes(cron=[rule]))
    world.evaluate(T0 + timedelta(hours=6))
    assert current(world) == rl((120, 120), (120, 120))
    world.evaluate(T0 + timedelta(hours=13))
    assert current(world) == rl((10, 8), (20, 16))
    assert world.engine.states[KEY].active_cron is None
    assert world.engine.states[KEY].reason == "RuleInactive"
    assert world.evaluate(T0 + timedelta(hours=14)) == []
    assert current(world) == rl((10, 8), (20, 16))


def test_a31_no_scale_down_below_an_active_cron_floor() -> None:
    world = world_with(autoscale_attributes(cron=[cron_rule(("110", "110Gi"))]))
    world.evaluate(T0 + timedelta(minutes=1))
    world.usage(60, tflops=0, vram=0, start=2)
    assert world.evaluate(T0 + timedelta(minutes=70)) == []
    assert world.engine.states[KEY].recommendation == rl((110, 110), (110, 110))
    assert current(world) == rl((110, 110), (110, 110))


def test_percentile_recommendation_flows_into_a_resize() -> None:
    world = world_with(autoscale_attributes())
    world.usage(120, tflops=100, vram=1_000_000_000)
    world.evaluate(T0 + timedelta(minutes=120))
    assert current(world) == raw((100, 1_717_986_918), (117, 3_435_973_836))


def test_a38_recommendation_is_the_next_current_and_survives_a_checkpoint() -> None:
    world = world_with(autoscale_attributes())
    world.usage(120, tflops=100, vram=1_000_000_000)
    world.evaluate(T0 + timedelta(minutes=120))
    state = world.engine.states[KEY]
    assert state.recommendation == raw((100, 1_717_986_918), (117, 3_435_973_836))
    data = checkpoint.encode(KEY, world.engine.aggregators[KEY], state)
    saved = checkpoint.decode(data)
    restored = Engine(new_id=lambda: "x")
    assert saved.aggregator is not None
    restored.aggregators[KEY] = WorkloadAggregator.restore(saved.aggregator)
    restored.states[KEY] = saved.state
    assert restored.states[KEY].recommendation == state.recommendation
    assert msgspec.json.encode(restored.aggregators[KEY].checkpoint()) == msgspec.json.encode(
        world.engine.aggregators[KEY].checkpoint())


def test_two_workers_share_one_recommendation_and_headroom() -> None:
    world = world_with(autoscale_attributes(cron=[cron_rule(("1500", "10Gi"))]), workers=2)
    world.evaluate(T0 + timedelta(minutes=1))
    # (1980 available + 2 x 10 own) // 2 workers = 1000 TFLOPS each: the cron request is capped to it.
    assert current(world, "a-0").request.milli_tflops == 1_000_000  # type: ignore[attr-defined]
    assert current(world, "a-1").request.milli_tflops == 1_000_000  # type: ignore[attr-defined]


def test_cron_only_state_is_checkpointed_so_a_restart_still_reverts() -> None:
    rule = cron_rule(("120", "120Gi"), start="0 0 * * *", end="0 12 * * *")
    world = world_with(autoscale_attributes(cron=[rule]))
    world.evaluate(T0 + timedelta(hours=6))
    saved = checkpoint.decode(checkpoint.encode(KEY, None, world.engine.states[KEY]))
    assert saved.aggregator is None and saved.state.active_cron is not None
    world.engine.states[KEY] = saved.state  # as a restarted autoscaler loads it
    world.evaluate(T0 + timedelta(hours=13))
    assert current(world) == rl((10, 8), (20, 16))
