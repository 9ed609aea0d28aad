"""Placement quality over time, folded from the event log into a bounded series per pool.

:class:`QualityTimeline` keeps its own projection (an empty ``ClusterState`` folded with
``domain.evolve``, event by event from position 1) and samples :func:`reads.quality_of` of every
pool whenever the log's commit time has moved ``stride`` seconds past the last sample. The
series holds at most ``max_points`` samples: when full, every other sample is dropped and the
stride doubles, so any log length is covered evenly at bounded memory (O(max_points × pools)).
``update`` reads only the events after its position, yielding to the event loop every
``YIELD_EVERY`` events so that a long first replay never stalls the allocator.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

import msgspec

from services.allocator import domain
from services.allocator.dashboard import reads
from services.allocator.domain.model import GpuState
from services.allocator.domain.state import ClusterState
from services.allocator.ports import EventStore

YIELD_EVERY = 2000


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
    seconds of commit time (> 0); ``max_points``: the series bound (>= 4)."""

    def __init__(self, *, stride_s: float = 1.0, max_points: int = 240) -> None:
        if stride_s <= 0 or max_points < 4:
            raise ValueError(f"stride_s must be > 0 and max_points >= 4, got {stride_s}, {max_points}")
        self.stride_s = stride_s
        self.max_points = max_points
        self.samples: list[Sample] = []
        self._state = ClusterState.empty()
        self._last_at: datetime | None = None
        self._lock = asyncio.Lock()

    @property
    def position(self) -> int:
        """The last log position folded."""
        return self._state.position

    async def update(self, store: EventStore) -> list[Sample]:
        """Fold the events after :attr:`position` and return the series, ending with "now" (a sample
        at the last folded event). Errors of the store propagate (CorruptEventError, database)."""
        async with self._lock:
            folded = 0
            async for stored in store.read(after=self._state.position):
                if self._last_at is not None and self._due(stored.recorded_at):
                    self._keep(sample_of(self._state, self._last_at))
                self._state = domain.evolve(self._state, stored.event)
                self._state.position = stored.position
                self._last_at = stored.recorded_at
                folded += 1
                if folded % YIELD_EVERY == 0:
                    await asyncio.sleep(0)
            if self._last_at is None:
                return list(self.samples)
            return [*self.samples, sample_of(self._state, self._last_at)]

    def _due(self, at: datetime) -> bool:
        return not self.samples or (at - self.samples[-1].at).total_seconds() >= self.stride_s

    def _keep(self, sample: Sample) -> None:
        self.samples.append(sample)
        if len(self.samples) >= self.max_points:
            self.samples = self.samples[::2]
            self.stride_s *= 2
