"""Prometheus metrics of one allocator instance, in its own registry (several may share a process).

Counters and histograms (updated as batches commit):
``gpuledger_decisions_total{type}`` (events appended, by event tag),
``gpuledger_allocation_outcomes_total{outcome,code}`` (requests decided: granted, queued, rejected,
intent_rejected, granted_from_queue; ``code`` the reason code: capacity, quota, unschedulable, ...),
``gpuledger_decision_latency_seconds`` (fetch to commit, per batch), ``gpuledger_batch_size``
(intents per committed batch), ``gpuledger_queue_wait_seconds{pool,qos}`` (request to grant of
requests granted from the queue), ``gpuledger_duplicates_total``, ``gpuledger_retries_total``.
Gauges: ``gpuledger_intents_pending`` (intents in JetStream not yet acknowledged, read at scrape),
``gpuledger_lease_epoch``, ``gpuledger_log_position``, ``gpuledger_leader`` (1 leader, 0 standby);
the per-pool gauges of :mod:`services.allocator.api.gauges` are read from the projection at scrape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.registry import Collector

from events import codec
from events import decisions as ev
from services.allocator.domain.state import ClusterState
from services.allocator.ports import StoredEvent

LATENCY_BUCKETS = (0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0065, 0.008, 0.01, 0.0125, 0.015, 0.02,
                   0.025, 0.035, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5)
"""Fetch-to-commit seconds: fine where a healthy writer's batches fall (0.5-25 ms), so that
``histogram_quantile`` (linear within a bucket) reads a p99 to within a fraction of a millisecond."""
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
WAIT_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)
"""Queue waits: from sub-second (a release right after) to a day."""


class AllocatorMetrics:
    """The allocator's instruments, registered in ``self.registry``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.decisions = Counter("gpuledger_decisions", "Events appended, by type", ["type"], registry=r)
        self.outcomes = Counter("gpuledger_allocation_outcomes", "Allocation requests decided, by outcome and "
                                "reason code", ["outcome", "code"], registry=r)
        self.latency = Histogram("gpuledger_decision_latency_seconds", "Fetch-to-commit time of a batch",
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.batch_size = Histogram("gpuledger_batch_size", "Intents per committed batch",
                                    buckets=BATCH_BUCKETS, registry=r)
        self.queue_wait = Histogram("gpuledger_queue_wait_seconds", "Request-to-grant time of requests granted "
                                    "from the queue", ["pool", "qos"], buckets=WAIT_BUCKETS, registry=r)
        self.intents_pending = Gauge("gpuledger_intents_pending", "Intents in JetStream not yet acknowledged "
                                     "by the allocator", registry=r)
        self.epoch = Gauge("gpuledger_lease_epoch", "Fencing epoch held (0 standby)", registry=r)
        self.position = Gauge("gpuledger_log_position", "Last log position in the projection", registry=r)
        self.leader = Gauge("gpuledger_leader", "1 when this replica is the leader", registry=r)
        self.duplicates = Counter("gpuledger_duplicates", "Intents skipped as already decided", registry=r)
        self.retries = Counter("gpuledger_retries", "Batches retried after a transient error", registry=r)
        self._collectors: set[str] = set()

    def watch(self, key: str, collector: Callable[[], Collector]) -> None:
        """Register the scrape-time collector ``collector()`` under ``key`` unless one is already
        (the HTTP API's pool gauges; an app built twice for one allocator registers them once)."""
        if key not in self._collectors:
            self._collectors.add(key)
            self.registry.register(collector())

    def record_commit(self, stored: Iterable[StoredEvent], *, intents: int, seconds: float) -> None:
        """Count one committed batch: its events by type, its size and its fetch-to-commit time."""
        for item in stored:
            self.decisions.labels(type=codec.tag_of(item.event)).inc()
        self.batch_size.observe(intents)
        self.latency.observe(seconds)

    def record_outcomes(self, stored: Iterable[StoredEvent], state: ClusterState) -> None:
        """Count the allocation outcomes of a committed batch and observe the queue waits of its
        grants from the queue (``state``: the projection after the batch, for the request time)."""
        for item in stored:
            event = item.event
            if isinstance(event, ev.AllocationGranted):
                outcome = "granted_from_queue" if event.from_queue else "granted"
                self.outcomes.labels(outcome=outcome, code="").inc()
                live = state.allocations.get(event.spec.allocation_id)
                if event.from_queue and live is not None:
                    wait = max(0.0, (event.at - live.requested_at).total_seconds())
                    self.queue_wait.labels(pool=event.spec.pool, qos=event.spec.qos).observe(wait)
            elif isinstance(event, ev.AllocationQueued | ev.AllocationRejected):
                outcome = "queued" if isinstance(event, ev.AllocationQueued) else "rejected"
                self.outcomes.labels(outcome=outcome, code=event.code).inc()
            elif isinstance(event, ev.IntentRejected) and event.intent_type == "request_allocation":
                self.outcomes.labels(outcome="intent_rejected", code="invalid").inc()

    def render(self) -> bytes:
        """The Prometheus text exposition of every instrument."""
        return generate_latest(self.registry)
