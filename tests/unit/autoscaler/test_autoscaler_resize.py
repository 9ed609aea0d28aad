"""The resize tracker: one intent in flight per worker, capped retries, blocks, lost answers."""

from __future__ import annotations

import itertools
from datetime import timedelta

from events import decisions
from events.values import Resources
from services.autoscaler.resize import ResizeTracker, worker_target
from services.autoscaler.view import LedgerView, Worker
from tests.unit.autoscaler.builders import T0, gpu, granted, node, res, rl, spec


def tracker(max_retries: int = 2) -> ResizeTracker:
    counter = itertools.count(1)
    return ResizeTracker(new_id=lambda: f"i-{next(counter)}", max_retries=max_retries,
                         retry_after=timedelta(minutes=5))


def worker() -> Worker:
    view = LedgerView()
    view.apply(node(gpu()))
    view.apply(granted(spec("a-0")))
    return view.workers["a-0"]


def rejected(request: Resources, limit: Resources, *, most: Resources) -> decisions.ResizeRejected:
    return decisions.ResizeRejected(at=T0, allocation_id="a-0", namespace="ml", pool="default", request=request,
                                    limit=limit, reason="quota", code="quota", max_request=most)


def test_one_intent_in_flight_until_answered_then_resent_when_lost() -> None:
    t, w = tracker(), worker()
    target = rl((50, 8), (50, 16))
    first = t.apply(w, target, now=T0)
    assert first is not None and first.intent_id == "i-1" and first.request == res(50, 8)
    assert t.apply(w, target, now=T0 + timedelta(minutes=1)) is None
    again = t.apply(w, target, now=T0 + timedelta(minutes=5))
    assert again is not None and again.intent_id == "i-2"


def test_worker_already_at_target_needs_no_intent() -> None:
    assert tracker().apply(worker(), rl((10, 8), (20, 16)), now=T0) is None


def test_retries_shrink_strictly_and_stop_at_the_cap() -> None:
    t, w = tracker(max_retries=2), worker()
    t.apply(w, rl((100, 8), (100, 16)), now=T0)
    retry = t.on_rejected(rejected(res(100, 8), res(100, 16), most=res(60, 8)), worker=w, headroom=None, now=T0)
    assert retry is not None and retry.request == res(60, 8) and retry.limit == res(100, 16)
    retry = t.on_rejected(rejected(res(60, 8), res(100, 16), most=res(40, 8)), worker=w, headroom=res(30, 100),
                          now=T0)
    assert retry is not None and retry.request == res(30, 8)
    assert t.on_rejected(rejected(res(30, 8), res(100, 16), most=res(20, 8)), worker=w, headroom=None,
                         now=T0) is None
    assert t.apply(w, rl((100, 8), (100, 16)), now=T0 + timedelta(minutes=1)) is None  # blocked


def test_no_retry_when_nothing_can_grow() -> None:
    t, w = tracker(), worker()
    t.apply(w, rl((100, 8), (100, 16)), now=T0)
    assert t.on_rejected(rejected(res(100, 8), res(100, 16), most=res(5, 8)), worker=w, headroom=None,
                         now=T0) is None


def test_invalid_intent_blocks_its_target() -> None:
    t, w = tracker(), worker()
    sent = t.apply(w, rl((50, 8), (50, 16)), now=T0)
    assert sent is not None
    t.on_intent_rejected(decisions.IntentRejected(at=T0, intent_id=sent.intent_id, reason="bad"), now=T0)
    assert t.apply(w, rl((50, 8), (50, 16)), now=T0 + timedelta(minutes=1)) is None
    assert t.apply(w, rl((60, 8), (60, 16)), now=T0 + timedelta(minutes=1)) is not None


def test_target_keeps_non_targeted_resources() -> None:
    w = worker()
    rec = rl((50, 30), (60, 40))
    assert worker_target(rec, w, compute=True, vram=False) == rl((50, 8), (60, 16))
    assert worker_target(rec, w, compute=False, vram=True) == rl((10, 30), (20, 40))
