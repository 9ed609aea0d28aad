"""Recommendation values and the steps every recommender shares: merge and the headroom cap.

Owns :class:`RequestLimit` (per-GPU request and limit, milli-TFLOPS and bytes), the result of
one recommender (:class:`Outcome`), TensorFusion's merge of several results
(``GetRecommendation``) and the recommendation processor that
caps scaled-up *requests* to the per-worker headroom (``internal/autoscaler/recommender/recommendation.go``). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from events.quantity import format_bytes, format_milli
from events.values import Resources


class RequestLimit(msgspec.Struct, frozen=True, kw_only=True):
    """Per-GPU ``request`` and ``limit`` (``milli_tflops``, ``vram_bytes``; no compute percent)."""

    request: Resources = Resources()
    limit: Resources = Resources()

    def is_zero(self) -> bool:
        """True when every value is zero (TensorFusion ``IsZero``)."""
        return self.request.is_zero() and self.limit.is_zero()


ZERO = RequestLimit()


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """One recommender's result (TensorFusion ``RecResult``).

    ``has_applied`` true means "nothing new" (the merge ignores it); ``scale_down_locking`` makes
    the result a floor for the merged request; ``reason``/``message`` form the status condition.
    """

    resources: RequestLimit
    has_applied: bool
    scale_down_locking: bool = False
    reason: str = ""
    message: str = ""


def _take_larger(dst: RequestLimit, src: RequestLimit) -> RequestLimit:
    """Per resource: when ``dst`` requests less than ``src``, copy src's request AND limit."""
    req, lim = dst.request, dst.limit
    if req.milli_tflops < src.request.milli_tflops:
        req = msgspec.structs.replace(req, milli_tflops=src.request.milli_tflops)
        lim = msgspec.structs.replace(lim, milli_tflops=src.limit.milli_tflops)
    if req.vram_bytes < src.request.vram_bytes:
        req = msgspec.structs.replace(req, vram_bytes=src.request.vram_bytes)
        lim = msgspec.structs.replace(lim, vram_bytes=src.limit.vram_bytes)
    return RequestLimit(request=req, limit=lim)


def merge(outcomes: Iterable[Outcome], *, current: RequestLimit) -> RequestLimit | None:
    """Merge recommender results (as TensorFusion's ``GetRecommendation``): None when nothing new or below
    a cron floor.

    Unapplied results merge by larger request; locking results build the floor. Zero dimensions
    are filled from ``current`` (request and limit together).
    """
    rec, floor = ZERO, ZERO
    for outcome in outcomes:
        if not outcome.has_applied:
            rec = _take_larger(rec, outcome.resources)
        if outcome.scale_down_locking:
            floor = _take_larger(floor, outcome.resources)
    if rec.is_zero():
        return None
    if (rec.request.milli_tflops < floor.request.milli_tflops
            or rec.request.vram_bytes < floor.request.vram_bytes):
        return None
    return _zero_fill(rec, current)


def _zero_fill(rec: RequestLimit, current: RequestLimit) -> RequestLimit:
    req, lim = rec.request, rec.limit
    if req.milli_tflops == 0 or lim.milli_tflops == 0:
        req = msgspec.structs.replace(req, milli_tflops=current.request.milli_tflops)
        lim = msgspec.structs.replace(lim, milli_tflops=current.limit.milli_tflops)
    if req.vram_bytes == 0 or lim.vram_bytes == 0:
        req = msgspec.structs.replace(req, vram_bytes=current.request.vram_bytes)
        lim = msgspec.structs.replace(lim, vram_bytes=current.limit.vram_bytes)
    return RequestLimit(request=req, limit=lim)


def cap_to_headroom(
    rec: RequestLimit, *, current: RequestLimit, max_allowed: Resources | None
) -> tuple[RequestLimit, str]:
    """Cap scaled-up requests to ``max_allowed`` per worker (as TensorFusion's ``RecommendationProcessor``);
    limits are never capped.

    Returns the capped recommendation and the message (empty when nothing changed). ``None``
    means "no cap known" (no workers).
    """
    if max_allowed is None:
        return rec, ""
    req, notes = rec.request, []
    if current.request.milli_tflops < req.milli_tflops > max_allowed.milli_tflops:
        req = msgspec.structs.replace(req, milli_tflops=max_allowed.milli_tflops)
        notes.append(f"TFlops request set to max allowed: ({format_milli(max_allowed.milli_tflops)})")
    if current.request.vram_bytes < req.vram_bytes > max_allowed.vram_bytes:
        req = msgspec.structs.replace(req, vram_bytes=max_allowed.vram_bytes)
        notes.append(f"VRAM request set to max allowed: ({format_bytes(max_allowed.vram_bytes)})")
    return RequestLimit(request=req, limit=rec.limit), ", ".join(notes)


def scales_up(rec: RequestLimit, current: RequestLimit) -> bool:
    """True when some request grows (the processor runs only then)."""
    return (current.request.milli_tflops < rec.request.milli_tflops
            or current.request.vram_bytes < rec.request.vram_bytes)


def describe(rec: RequestLimit) -> dict[str, dict[str, str]]:
    """Canonical quantity strings: ``{"request": {"tflops", "vram"}, "limit": {...}}``."""
    return {
        part: {"tflops": format_milli(res.milli_tflops), "vram": format_bytes(res.vram_bytes)}
        for part, res in (("request", rec.request), ("limit", rec.limit))
    }
