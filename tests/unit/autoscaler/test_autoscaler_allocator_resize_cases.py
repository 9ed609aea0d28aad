"""Autoscaler cases A34-A36: the allocator side of a resize, as the autoscaler relies on it.

The allocation domain (the lead's code) decides ResizeAllocation with AdjustAllocation
semantics; these cases pin what the autoscaler's capped retry depends on: ``max_request`` on
a rejection, available capacity moving by the request delta, quota usage scaled by GPU count,
and the quota dimension named on a limit-only rejection. A37 (pod-patch rollback) has no
counterpart: a resize is one atomic event in the log, there is no second write to undo.
"""

from __future__ import annotations

import msgspec

from events import decisions, intents
from events.values import QuotaAmount, QuotaSpec, Resources
from tests.unit.autoscaler.builders import GI, gpu, spec
from tests.unit.autoscaler.world import World


def resize(world: World, allocation_id: str, request: Resources, limit: Resources) -> decisions.AnyEvent:
    return world.send(intents.ResizeAllocation(intent_id=f"x-{len(world.log)}", allocation_id=allocation_id,
                                               request=request, limit=limit))[0]


def r(tflops: float, vram: int) -> Resources:
    return Resources(milli_tflops=round(tflops * 1000), vram_bytes=vram)


def test_a34_rejection_reports_room_then_up_and_down_move_available() -> None:
    world = World()
    world.node(gpu(tflops=100, vram_gi=20))
    world.allocate(spec("a-0", request=r(50, 10 * GI), limit=r(50, 10 * GI)))
    after_grant = world.engine.view.available("gpu-0")
    assert after_grant == r(50, 10 * GI)
    rejected = resize(world, "a-0", r(300, 30 * GI), r(400, 40 * GI))
    assert isinstance(rejected, decisions.ResizeRejected)
    assert rejected.max_request == r(100, 20 * GI)  # available + the allocation's own request
    assert isinstance(resize(world, "a-0", r(90, 15 * GI), r(90, 15 * GI)), decisions.AllocationResized)
    assert world.engine.view.available("gpu-0") == r(10, 5 * GI)
    assert isinstance(resize(world, "a-0", r(10, GI), r(10, GI)), decisions.AllocationResized)
    assert world.engine.view.available("gpu-0") == r(90, 19 * GI)


def test_a35_quota_usage_scales_by_gpu_count() -> None:
    world = World()
    world.node(gpu("g0", tflops=100, vram_gi=1), gpu("g1", tflops=100, vram_gi=1))
    world.quota("ml", QuotaSpec(total_requests=QuotaAmount(milli_tflops=200_000, vram_bytes=2000),
                                total_limits=QuotaAmount(milli_tflops=200_000, vram_bytes=2000)))
    world.allocate(msgspec.structs.replace(spec("a-0", request=r(30, 300), limit=r(30, 300)), gpu_count=2))
    usage = world.state.usage["ml"]
    assert (usage.requests_milli_tflops, usage.requests_vram_bytes) == (60_000, 600)
    assert isinstance(resize(world, "a-0", r(40, 400), r(50, 500)), decisions.AllocationResized)
    usage = world.state.usage["ml"]
    assert (usage.requests_milli_tflops, usage.requests_vram_bytes) == (80_000, 800)
    assert (usage.limits_milli_tflops, usage.limits_vram_bytes) == (100_000, 1000)
    resize(world, "a-0", r(30, 300), r(30, 300))
    usage = world.state.usage["ml"]
    assert (usage.requests_milli_tflops, usage.limits_milli_tflops) == (60_000, 60_000)


def test_a36_limit_only_growth_over_total_quota_names_the_dimension() -> None:
    world = World()
    world.node(gpu(tflops=1000, vram_gi=1))
    world.quota("ml", QuotaSpec(total_requests=QuotaAmount(milli_tflops=200_000, vram_bytes=2000),
                                total_limits=QuotaAmount(milli_tflops=200_000, vram_bytes=2000)))
    world.allocate(spec("a-0", request=r(30, 300), limit=r(30, 300)))
    rejected = resize(world, "a-0", r(30, 300), r(250, 2500))
    assert isinstance(rejected, decisions.ResizeRejected)
    assert rejected.quota_dimension == "total.max.tflops.limit"
    assert world.state.usage["ml"].limits_milli_tflops == 30_000


def test_a36_variant_new_absolute_limit_over_single_max() -> None:
    world = World()
    world.node(gpu(tflops=1000, vram_gi=1))
    world.quota("ml", QuotaSpec(max_limits=QuotaAmount(milli_tflops=100_000, vram_bytes=1000)))
    world.allocate(spec("a-0", request=r(50, 500), limit=r(50, 500)))
    rejected = resize(world, "a-0", r(50, 500), r(150, 500))
    assert isinstance(rejected, decisions.ResizeRejected)
    assert rejected.quota_dimension == "single.max.tflops.limit"
