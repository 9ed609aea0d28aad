"""One sample per worker per minute: a worker's per-GPU samples merged by max before the histograms.

TensorFusion reads usage with ``max(compute_tflops), max(memory_bytes)`` grouped by namespace,
workload, worker and a one-minute bin (history), or per worker over each round's window
(realtime) - TensorFusion internal/autoscaler/metrics (``metrics_provider.go``). A multi-GPU
worker writes one row per device, and the ``max`` merges them, so an idle second GPU never adds
a zero to the TFLOPS histogram. gpuledger receives the rows one by one, so it merges them here:
the pending sample of a worker collects every sample of one UTC minute (max TFLOPS, max VRAM,
latest time) and goes to the aggregator when a later minute starts or when an evaluation round
flushes it (the realtime window). A sample of an earlier minute than the pending one is out of
order. Pure: no clock; the caller feeds and flushes.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import msgspec

MERGE_WINDOW = timedelta(minutes=1)
"""TensorFusion's history bin (``date_bin('1 minute', ts)``)."""


class MergedSample(msgspec.Struct, kw_only=True):
    """The max over one worker's samples of one minute: milli-TFLOPS, bytes, and the latest time."""

    worker: str
    milli_tflops: int
    vram_bytes: int
    at: datetime
    window: datetime


def window_of(at: datetime) -> datetime:
    """The start of ``at``'s minute (``at`` timezone-aware; every real UTC offset is whole minutes,
    so this is the start of its UTC minute too, as an instant)."""
    offset = at.utcoffset()
    if offset and offset % MERGE_WINDOW:  # a seconds offset: go through UTC
        at = at.astimezone(UTC)
    return at.replace(second=0, microsecond=0)


class SampleMerger:
    """Pending merged samples of the workers of one workload, by worker id."""

    def __init__(self) -> None:
        self.pending: dict[str, MergedSample] = {}

    def add(self, worker: str, *, milli_tflops: int, vram_bytes: int, at: datetime) -> tuple[bool, MergedSample | None]:
        """Merge one sample; returns (taken, the completed sample of an earlier minute or None).

        ``taken`` is False when ``at`` falls in an earlier minute than the worker's pending sample.
        """
        window = window_of(at)
        current = self.pending.get(worker)
        if current is not None and window < current.window:
            return False, None
        if current is not None and window == current.window:
            current.milli_tflops = max(current.milli_tflops, milli_tflops)
            current.vram_bytes = max(current.vram_bytes, vram_bytes)
            current.at = max(current.at, at)
            return True, None
        self.pending[worker] = MergedSample(worker=worker, milli_tflops=milli_tflops, vram_bytes=vram_bytes, at=at,
                                            window=window)
        return True, current

    def flush(self, workers: Iterable[str] | None = None) -> list[MergedSample]:
        """Complete and remove the pending samples (of ``workers``, default all), oldest first.

        A later sample of the same minute then starts a new merged sample (the next round's window).
        """
        names = list(self.pending) if workers is None else [w for w in workers if w in self.pending]
        done = [self.pending.pop(name) for name in names]
        return sorted(done, key=lambda s: (s.at, s.worker))
