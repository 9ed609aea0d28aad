"""Exact unit arithmetic of the allocator: percent -> milli-TFLOPS, score rounding and normalisation.

TensorFusion converts a compute percentage with ``int(percent × capacity / 100)`` in float64 and
truncates to whole TFLOPS (a quirk); gpuledger converts exactly in milli-TFLOPS and rounds UP to
the next milli-TFLOPS, so a share never takes less than it asked for. Scores use float64 and
round half away from zero like Go's ``math.Round`` (Python's ``round`` is half-to-even).
"""

from __future__ import annotations

import math

from events.values import Resources

PERCENT_SCALE = 100_000
"""100 % in milli-percent."""


def tflops_on(request: Resources, capacity_milli_tflops: int) -> int:
    """Milli-TFLOPS ``request`` takes on a GPU of ``capacity_milli_tflops``.

    A compute percentage is converted with that GPU's own capacity, rounded up:
    ``ceil(compute_milli_percent × capacity / 100_000)``; otherwise ``request.milli_tflops``.
    """
    if request.compute_milli_percent:
        return -(-request.compute_milli_percent * capacity_milli_tflops // PERCENT_SCALE)
    return request.milli_tflops


def round_half_away(value: float) -> int:
    """Round to the nearest integer, halves away from zero (Go ``math.Round``): 62.5 -> 63, -0.5 -> -1."""
    return int(math.copysign(math.floor(abs(value) + 0.5), value))


def normalize(vram_pct: float, tflops_pct: float, *, vram_weight: float, tflops_weight: float) -> int:
    """TensorFusion strategy score: ``clamp(round_half_away(v·wv + t·wt), 0, 100)``."""
    return min(100, max(0, round_half_away(vram_pct * vram_weight + tflops_pct * tflops_weight)))


def available_percent(available: int, capacity: int) -> float:
    """``available / capacity × 100`` in float64 (TensorFusion order of operations); 0 for zero capacity."""
    if capacity <= 0:
        return 0.0
    return available / capacity * 100
