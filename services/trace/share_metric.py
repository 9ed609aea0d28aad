"""The metrics of ``trace fairness``: Jain's index, percentiles and time integrals of a run.

A run is a sequence of decision batches at simulated times; between two batches nothing changes,
so every quantity is piecewise constant and is integrated exactly over the measured window
[``start``, ``end``) (the warm-up before ``start`` is not measured):
- utilisation: allocated milli-GPU / capacity, time-weighted mean, in percent;
- per share, seconds below its guarantee while demand waits (a request of the share waits whose
  grant would keep the share within its guarantee);
- Jain's index of the weighted dominant shares (Jain, Chiu, Hawe 1984: (Σx)² / (n Σx²), 1 when all
  are equal, 1/n when one holds everything), time-weighted over the moments it is defined.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import msgspec


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index of ``values`` (each >= 0): (Σx)² / (n Σx²), in [1/n, 1]; 1.0 when all are 0.

    Raises ValueError on an empty sequence or a negative value.
    """
    if not values:
        raise ValueError("values: Jain's index of no value is undefined")
    if any(v < 0 for v in values):
        raise ValueError(f"values: negative value in {list(values)}")
    squares = sum(v * v for v in values)
    if squares == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * squares)


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values``; NaN when empty."""
    if not 0 < q <= 100:
        raise ValueError(f"q: {q} is not in (0, 100]")
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


class Integrals(msgspec.Struct, kw_only=True):
    """What a :class:`Timeline` integrated: seconds measured, utilisation (percent, time-weighted),
    per share the seconds below guarantee while demand waited, and Jain's index (time-weighted
    over ``jain_seconds``, the measured time it was defined; NaN when never)."""

    seconds: float
    utilisation_pct: float
    below_guarantee_s: dict[str, float]
    jain: float
    jain_seconds: float


class Timeline:
    """Integrates a run's piecewise-constant state over [``start``, ``end``).

    Call :meth:`record` after every decision batch with the state from then on (times must not
    decrease), then :meth:`finish`. Raises ValueError when ``end <= start``, a capacity is not
    positive or time goes back.
    """

    def __init__(self, *, start: float, end: float, capacity_milli: int, shares: Sequence[str]) -> None:
        if end <= start:
            raise ValueError(f"end: {end} is not after start {start}")
        if capacity_milli <= 0:
            raise ValueError(f"capacity_milli: {capacity_milli} is not positive")
        self.start, self.end, self.capacity = start, end, capacity_milli
        self._t = start
        self._used = 0
        self._below: frozenset[str] = frozenset()
        self._jain: float | None = None
        self._used_area = 0.0
        self._below_s = dict.fromkeys(shares, 0.0)
        self._jain_area = 0.0
        self._jain_s = 0.0

    def _advance(self, t: float) -> None:
        if t < self._t and t > self.start:
            raise ValueError(f"t: {t} is before the last record at {self._t}")
        until = min(max(t, self.start), self.end)
        span = until - self._t
        if span > 0:
            self._used_area += self._used * span
            for share in self._below:
                self._below_s[share] += span
            if self._jain is not None:
                self._jain_area += self._jain * span
                self._jain_s += span
            self._t = until

    def record(self, t: float, *, used_milli: int, below: frozenset[str], jain: float | None) -> None:
        """From ``t`` on: ``used_milli`` milli-GPU allocated, the shares ``below`` their guarantee
        while demand waits, and Jain's index (None: undefined now)."""
        self._advance(t)
        self._used, self._below, self._jain = used_milli, below, jain

    def finish(self) -> Integrals:
        """Integrate up to ``end`` and return the figures."""
        self._advance(self.end)
        seconds = self.end - self.start
        return Integrals(
            seconds=seconds, utilisation_pct=100 * self._used_area / (self.capacity * seconds),
            below_guarantee_s=dict(self._below_s),
            jain=self._jain_area / self._jain_s if self._jain_s else math.nan, jain_seconds=self._jain_s,
        )


def weighted_dominant_shares(usage: Mapping[str, Sequence[float]], capacity: Sequence[float],
                             weights: Mapping[str, float]) -> dict[str, float]:
    """Per share, max over resources of usage / capacity, divided by the share's weight normalised
    to sum 1 over ``weights`` (so a share holding exactly its weight's part of the pool has 1.0).

    ``usage[share]`` and ``capacity`` list the same resources (e.g. milli-TFLOPS, bytes, GPUs); a
    resource of capacity 0 is skipped.
    """
    total = sum(weights.values())
    out = {}
    for share, amounts in usage.items():
        dominant = max((u / c for u, c in zip(amounts, capacity, strict=True) if c > 0), default=0.0)
        out[share] = dominant / (weights[share] / total)
    return out
