"""A long synthetic usage series (three days, a daily cycle with spikes) through engine + domain.

Recommendations must follow the cycle, stay inside the floors and ratio bands, and the 10 %
update threshold must suppress churn compared with no threshold. Also property tests of the
recommender's bounds over random estimates.
"""

from __future__ import annotations

import math
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from events import decisions
from services.autoscaler import config as cfg
from services.autoscaler import recommender
from services.autoscaler.recommendation import RequestLimit
from tests.unit.autoscaler.builders import GI, T0, res, rl, sample, spec
from tests.unit.autoscaler.world import World, autoscale_attributes

ORIGINAL = rl((40, 16), (80, 32))


def usage_at(minute: int) -> tuple[float, int]:
    """TFLOPS and VRAM bytes: a daily sine (peak 15:00, idle at night) plus a 15-minute spike every 7 h."""
    hour = (minute / 60) % 24
    day = max(0.0, math.sin(2 * math.pi * (hour - 9) / 24))
    spike = 150.0 if minute % (7 * 60) < 15 else 0.0
    return 5 + 90 * day + spike, int((2 + 10 * day) * GI)


def run_days(threshold: str, days: int = 3) -> tuple[World, list[tuple[int, RequestLimit]]]:
    world = World()
    world.node()
    world.allocate(spec("a-0", request=ORIGINAL.request, limit=ORIGINAL.limit,
                        attributes=autoscale_attributes(updateThreshold=threshold)))
    seen = []
    for minute in range(0, days * 24 * 60, 5):
        tflops, vram = usage_at(minute)
        world.engine.ingest(sample(allocation_id="a-0", tflops=tflops, vram=vram, at=T0 + timedelta(minutes=minute)))
        if minute % 30 == 25:
            world.evaluate(T0 + timedelta(minutes=minute))
            seen.append((minute, world.engine.view.workers["a-0"].current))
    return world, seen


def test_recommendations_follow_the_daily_cycle_within_bounds() -> None:
    _, seen = run_days("0.1")
    for _, cur in seen:
        assert 4_000 <= cur.request.milli_tflops <= 400_000
        assert cur.limit.milli_tflops >= ORIGINAL.limit.milli_tflops
        assert int(0.2 * 16 * GI) <= cur.request.vram_bytes <= 5 * 16 * GI
        assert max(GI, int(0.2 * 32 * GI)) <= cur.limit.vram_bytes <= 5 * 32 * GI
    by_minute = dict(seen)
    for day in (1, 2):
        afternoon = by_minute[day * 1440 + 16 * 60 + 25]
        night = by_minute[day * 1440 + 5 * 60 + 25]
        assert afternoon.request.milli_tflops > 2 * night.request.milli_tflops
        assert afternoon.request.vram_bytes > 2 * night.request.vram_bytes


def test_every_resize_moves_a_request_by_more_than_the_threshold() -> None:
    world, _ = run_days("0.1")
    previous = ORIGINAL
    resized = [e for e in world.log if isinstance(e, decisions.AllocationResized)]
    assert resized
    for event in resized:
        moved = [(math.ceil(previous.request.milli_tflops / 1000), math.ceil(event.request.milli_tflops / 1000)),
                 (previous.request.vram_bytes, event.request.vram_bytes)]
        assert any(abs(old - new) > int(old * 0.1) for old, new in moved)
        previous = RequestLimit(request=event.request, limit=event.limit)


def test_threshold_suppresses_churn() -> None:
    with_threshold, _ = run_days("0.1")
    without, _ = run_days("0")
    count = [len([e for e in w.log if isinstance(e, decisions.AllocationResized)]) for w in (with_threshold, without)]
    assert count[0] < count[1]


amounts = st.integers(min_value=0, max_value=20_000)


@settings(max_examples=200, deadline=None)
@given(lower=amounts, target=amounts, upper=amounts, orig_req=st.integers(1, 500), orig_lim=st.integers(1, 500),
       qos=st.sampled_from(["", "low", "medium", "high", "critical"]))
def test_recommendation_respects_floors_bands_and_compute_limit(lower: int, target: int, upper: int, orig_req: int,
                                                                orig_lim: int, qos: str) -> None:
    lo, hi = sorted((lower, upper))
    est = recommender.Estimates(lower=res(lo, lo), target=res(min(max(target, lo), hi), min(max(target, lo), hi)),
                                upper=res(hi, hi))
    original = rl((orig_req, orig_req), (orig_lim, orig_lim))
    rec, _ = recommender.propose(est, config=cfg.PercentileConfig(), qos=qos, current=original, original=original)
    req_tf, lim_tf = rec.request.milli_tflops, rec.limit.milli_tflops
    assert lim_tf >= original.limit.milli_tflops
    assert int(original.request.milli_tflops * 0.1) <= req_tf <= original.request.milli_tflops * 10
    assert int(original.request.vram_bytes * 0.2) <= rec.request.vram_bytes <= original.request.vram_bytes * 5
    assert int(original.limit.vram_bytes * 0.2) <= rec.limit.vram_bytes <= original.limit.vram_bytes * 5
    if req_tf < 1000:  # only a ratio ceiling below 1 TFLOPS can undercut the floor
        assert original.request.milli_tflops * 10 < 1000
