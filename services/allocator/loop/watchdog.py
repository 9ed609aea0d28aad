"""The allocator's stuck alarm and the loop's own instruments (failure handling, append, relay).

:class:`Watchdog` remembers since when the loop has failed to make progress (a batch, a fetch,
a catch-up or a reload failing and being retried) and at which intent stream sequence. Once that
lasts ``stuck_after_s`` (``GPULEDGER_STUCK_AFTER_S``), :attr:`Watchdog.stuck` is true: ``/readyz``
answers 503 and ``gpuledger_stuck_seconds`` keeps rising until the loop moves again. The
instruments are registered in the allocator's Prometheus registry:

- ``gpuledger_stuck_seconds``: seconds the loop has been failing without progress (0 when fine).
- ``gpuledger_intents_isolated_total``: intents rejected because they alone failed to decide or
  append (found by splitting their batch).
- ``gpuledger_intent_gaps_skipped_total``: stream sequences of GPULEDGER_INTENTS skipped because
  they were deleted from the stream.
- ``gpuledger_relay_skipped_events_total``: events the relay could not publish (over NATS's
  maximum payload) and skipped.
- ``gpuledger_append_latency_seconds``: time of each fenced ``EventStore.append`` (histogram).
- ``gpuledger_relay_lag_events``: on the leader, log position minus the last relayed position.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

APPEND_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Watchdog:
    """Progress tracking of one allocator replica (``clock``: monotonic seconds)."""

    def __init__(self, registry: CollectorRegistry, *, stuck_after_s: float, relay_lag: Callable[[], float],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stuck_after_s = stuck_after_s
        self._clock = clock
        self._since: float | None = None
        self.failing_seq = 0
        self.last_error = ""
        stuck = Gauge("gpuledger_stuck_seconds", "Seconds the allocator loop has failed without progress",
                      registry=registry)
        stuck.set_function(lambda: self.stuck_s)
        self.isolated = Counter("gpuledger_intents_isolated", "Intents rejected after failing alone",
                                registry=registry)
        self.gaps = Counter("gpuledger_intent_gaps_skipped", "Deleted intent stream sequences skipped",
                            registry=registry)
        self.relay_skipped = Counter("gpuledger_relay_skipped_events", "Events too large to relay, skipped",
                                     registry=registry)
        self.append_latency = Histogram("gpuledger_append_latency_seconds", "Time of one fenced append",
                                        buckets=APPEND_BUCKETS, registry=registry)
        lag = Gauge("gpuledger_relay_lag_events", "Log position minus the last relayed position (leader)",
                    registry=registry)
        lag.set_function(relay_lag)

    def failed(self, seq: int, error: BaseException) -> None:
        """Record a failed attempt at stream sequence ``seq`` (the clock starts at the first one)."""
        if self._since is None:
            self._since = self._clock()
        self.failing_seq = seq
        self.last_error = repr(error)[:512]

    def progressed(self) -> None:
        """The loop moved (a commit, an empty fetch, a standby's catch-up): the alarm resets."""
        self._since = None
        self.last_error = ""

    @property
    def stuck_s(self) -> float:
        """Seconds since the first failure without progress since (0 when not failing)."""
        return 0.0 if self._since is None else max(0.0, self._clock() - self._since)

    @property
    def stuck(self) -> bool:
        """True once the loop has failed without progress for ``stuck_after_s`` or longer."""
        return self._since is not None and self.stuck_s >= self.stuck_after_s
