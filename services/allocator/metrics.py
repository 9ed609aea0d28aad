"""Prometheus metrics of one allocator instance, in its own registry (several may share a process).

Names: ``gpuledger_decisions_total{type}`` (events appended, by event tag),
``gpuledger_decision_latency_seconds`` (fetch to commit, per batch), ``gpuledger_batch_size``
(intents per committed batch), ``gpuledger_queue_depth`` (intents not yet acked, set at scrape),
``gpuledger_lease_epoch``, ``gpuledger_log_position``, ``gpuledger_leader`` (1 leader, 0 standby),
``gpuledger_duplicates_total``, ``gpuledger_retries_total`` (transient failures).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from events import codec
from services.allocator.ports import StoredEvent

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class AllocatorMetrics:
    """The allocator's instruments, registered in ``self.registry``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.decisions = Counter("gpuledger_decisions", "Events appended, by type", ["type"], registry=r)
        self.latency = Histogram("gpuledger_decision_latency_seconds", "Fetch-to-commit time of a batch",
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.batch_size = Histogram("gpuledger_batch_size", "Intents per committed batch",
                                    buckets=BATCH_BUCKETS, registry=r)
        self.queue_depth = Gauge("gpuledger_queue_depth", "Intents not yet acked", registry=r)
        self.epoch = Gauge("gpuledger_lease_epoch", "Fencing epoch held (0 standby)", registry=r)
        self.position = Gauge("gpuledger_log_position", "Last log position in the projection", registry=r)
        self.leader = Gauge("gpuledger_leader", "1 when this replica is the leader", registry=r)
        self.duplicates = Counter("gpuledger_duplicates", "Intents skipped as already decided", registry=r)
        self.retries = Counter("gpuledger_retries", "Batches retried after a transient error", registry=r)

    def record_commit(self, stored: Iterable[StoredEvent], *, intents: int, seconds: float) -> None:
        """Count one committed batch: its events by type, its size and its fetch-to-commit time."""
        for item in stored:
            self.decisions.labels(type=codec.tag_of(item.event)).inc()
        self.batch_size.observe(intents)
        self.latency.observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition of every instrument."""
        return generate_latest(self.registry)
