"""Placement quality over time: a bounded series per pool, kept as the reader's projection folds.

:class:`QualityTimeline` samples :func:`reads.quality_of` of every pool whenever the log's commit
time has moved ``stride_s`` seconds past the last sample; the sample is of the projection just
before the event that crossed the stride, stamped with the previous event's commit time. The
series holds at most ``max_points`` samples: when full, every other sample is dropped and the
stride doubles, so any log length is covered evenly at bounded memory (O(max_points × pools)).

It keeps no projection of its own. Live, it is one of the follower's ``steps``
(:attr:`Follower.steps <services.allocator.api.follower.Follower.steps>`): called before each
event is folded, with the follower's projection as it is then, so the page renders from memory
(the series plus a "now" sample of the follower's projection) and never reads the log.

A reader starts from the newest snapshot (plus the events after it), so the history before its
start is rebuilt once by :meth:`QualityTimeline.attach`: the events from position 1 up to the
follower's position are folded into a temporary projection in slices of :data:`SLICE_EVENTS`
with a yield between slices, then the series goes live at the exact position the follower has
reached. The result is the series a single fold of the whole log from position 1 gives. A log
longer than ``max_backfill`` events when the reader starts is not backfilled: the series then
begins at the reader's start and :attr:`QualityTimeline.note` says so on the page.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Literal

import msgspec

from services.allocator import domain
from services.allocator.api.follower import Follower
from services.allocator.dashboard import reads
from services.allocator.domain.model import GpuState
from services.allocator.domain.state import ClusterState
from services.allocator.ports import StoredEvent

SLICE_EVENTS = 500
"""Events of the start-up backfill folded between two yields to the event loop."""
MAX_BACKFILL_EVENTS = 250_000
"""Longest log (events) rebuilt at a reader's start; a longer one starts the series at the reader's start."""

Phase = Literal["waiting", "backfilling", "live"]
"""``waiting``: the follower has not loaded yet; ``backfilling``: history before the reader's start
is being folded; ``live``: the series follows the follower's folds."""


class Sample(msgspec.Struct, frozen=True, kw_only=True):
    """Quality of each pool (name -> Quality) at log ``position``, committed at ``at``."""

    position: int
    at: datetime
    pools: dict[str, reads.Quality]


def sample_of(state: ClusterState, at: datetime) -> Sample:
    """The quality of every pool of ``state`` now (one pass over its GPU records)."""
    members: dict[str, list[GpuState]] = {}
    for gpu in state.gpus.values():
        members.setdefault(gpu.pool, []).append(gpu)
    return Sample(position=state.position, at=at,
                  pools={pool: reads.quality_of(gpus) for pool, gpus in sorted(members.items())})


class QualityTimeline:
    """The sampled series (see the module docstring). ``stride_s``: starting sample spacing in
    seconds of commit time (> 0); ``max_points``: the series bound (>= 4); ``max_backfill``: the
    longest log in events rebuilt at start (>= 0). Raises ValueError for values out of range."""

    def __init__(self, *, stride_s: float = 1.0, max_points: int = 2000,
                 max_backfill: int = MAX_BACKFILL_EVENTS) -> None:
        if stride_s <= 0 or max_points < 4 or max_backfill < 0:
            raise ValueError(f"stride_s must be > 0, max_points >= 4 and max_backfill >= 0, "
                             f"got {stride_s}, {max_points}, {max_backfill}")
        self.stride_s = stride_s
        self.max_points = max_points
        self.max_backfill = max_backfill
        self.samples: list[Sample] = []
        self.position = 0
        """The last log position folded into the series."""
        self.phase: Phase = "waiting"
        self.note = ""
        """Why part of the history is not shown ("" when the series starts at position 1)."""
        self._last_at: datetime | None = None

    def observe(self, state: ClusterState, stored: StoredEvent) -> None:
        """The follower's step: ``state`` is its projection just before ``stored`` is folded.
        Ignored unless the series is live and ``stored`` is the next position."""
        if self.phase == "live" and stored.position == self.position + 1:
            self._step(state, stored)

    def series(self, state: ClusterState) -> list[Sample]:
        """The samples, ending with "now": ``state`` (the follower's projection) sampled at the last
        folded event's commit time, when ``state`` is at :attr:`position`. No I/O."""
        if self._last_at is None or state.position != self.position:
            return list(self.samples)
        return [*self.samples, sample_of(state, self._last_at)]

    async def attach(self, follower: Follower) -> None:
        """Register as ``follower``'s step, wait for its first load, rebuild the history before it
        (module docstring) and go live. Errors of the store propagate (CorruptEventError,
        database); the series then stays as it was and :meth:`attach` may be called again."""
        if self.observe not in follower.steps:
            follower.steps.append(self.observe)
        await follower.loaded.wait()
        if self.phase == "live":
            return
        if follower.state.position > self.max_backfill and self.position == 0:
            self.note = (f"History before log position {follower.state.position} is not shown: the log was longer "
                         f"than {self.max_backfill:,} events when this reader started.")
            self.position = follower.state.position
            self.phase = "live"
            return
        self.phase = "backfilling"
        state = ClusterState.empty()
        while True:
            if self.position > state.position:  # a retry after a failed read: refold from the start
                self.samples, self.position, self._last_at, state = [], 0, None, ClusterState.empty()
            behind = follower.state.position - self.position
            if behind <= 0:
                self.phase = "live"  # no await since the check: the follower's next step is position + 1
                return
            async for stored in follower.store.read(after=self.position, limit=min(SLICE_EVENTS, behind)):
                self._step(state, stored)
                state = domain.evolve(state, stored.event)
                state.position = stored.position
            await asyncio.sleep(0)

    def _step(self, state: ClusterState, stored: StoredEvent) -> None:
        if self._last_at is not None and self._due(stored.recorded_at):
            self._keep(sample_of(state, self._last_at))
        self._last_at = stored.recorded_at
        self.position = stored.position

    def _due(self, at: datetime) -> bool:
        return not self.samples or (at - self.samples[-1].at).total_seconds() >= self.stride_s

    def _keep(self, sample: Sample) -> None:
        self.samples.append(sample)
        if len(self.samples) >= self.max_points:
            self.samples = self.samples[::2]
            self.stride_s *= 2
