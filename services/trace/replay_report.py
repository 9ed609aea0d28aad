"""The report of ``trace replay``: the :class:`Tracker` that folds the allocator's events into
per-pod outcomes, throughput, latency and queue-wait percentiles, final states of the pods,
allocated GPU % over trace time, and the verification of the log."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from events import decisions as ev
from services.trace.openb import TracePod


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50/p99 of ``values`` (seconds) in milliseconds, nearest-rank; zeros when empty."""
    if not values:
        return {"p50": 0.0, "p99": 0.0, "n": 0}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return round(1000 * ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))], 2)

    return {"p50": rank(0.50), "p99": rank(0.99), "n": len(ordered)}


class Tracker:
    """Folds the allocator's events into per-pod outcomes, latencies and the allocated milli-GPU."""

    def __init__(self, pods: dict[str, TracePod]) -> None:
        self.pods = pods
        self.sent: dict[str, float] = {}
        self.latency: list[float] = []
        self.queue_wait: list[float] = []
        self.queued_at: dict[str, float] = {}
        self.state: dict[str, str] = {}
        self.outcomes: dict[str, int] = {}
        self.decided: set[str] = set()
        self.used_milli = 0
        self.nodes_registered = 0

    def on_event(self, event: ev.AnyEvent, intent_id: str, now: float) -> None:
        """Apply one event (decided by ``intent_id``) received at ``now`` (monotonic seconds)."""
        if intent_id in self.sent and intent_id not in self.decided:
            self.decided.add(intent_id)
            self.latency.append(now - self.sent[intent_id])
        match event:
            case ev.NodeRegistered():
                self.nodes_registered += 1
            case ev.AllocationGranted(spec=spec) if spec.allocation_id in self.pods:
                aid = spec.allocation_id
                if event.from_queue and aid in self.queued_at:
                    self.queue_wait.append(now - self.queued_at.pop(aid))
                else:
                    self.outcomes[aid] = self.outcomes.get(aid, 0) + 1
                self.state[aid] = "granted"
                self.used_milli += self.pods[aid].demand
            case ev.AllocationQueued(spec=spec) | ev.AllocationRejected(spec=spec) if spec.allocation_id in self.pods:
                aid = spec.allocation_id
                self.outcomes[aid] = self.outcomes.get(aid, 0) + 1
                queued = isinstance(event, ev.AllocationQueued)
                self.state[aid] = "queued" if queued else "rejected"
                if queued:
                    self.queued_at[aid] = now
            case ev.AllocationPreempted(allocation_id=aid) if aid in self.pods:
                if self.state.get(aid) == "granted":
                    self.used_milli -= self.pods[aid].demand
                self.state[aid] = "preempted"
            case ev.AllocationReleased(allocation_id=aid) if aid in self.pods:
                if self.state.get(aid) == "granted":
                    self.used_milli -= self.pods[aid].demand
                self.queued_at.pop(aid, None)
                self.state[aid] = "withdrawn" if event.was_queued else "released"
            case _:
                pass

    def final_counts(self) -> dict[str, int]:
        """How many pods ended in each state (``none``: no outcome seen)."""
        counts: dict[str, int] = {}
        for aid in self.pods:
            state = self.state.get(aid, "none")
            counts[state] = counts.get(state, 0) + 1
        return counts

    def multiple_outcomes(self) -> int:
        """Pods whose request got more than one first outcome (must be 0)."""
        return sum(1 for n in self.outcomes.values() if n > 1)


    def live(self) -> list[str]:
        """Allocation ids this replay holds now: granted or queued, or requested with no outcome yet."""
        return [aid for aid in self.pods if self.state.get(aid, "pending") in ("granted", "queued", "pending")
                and f"{aid}-req" in self.sent]


class ReplayReport(msgspec.Struct, kw_only=True):
    """What ``trace replay --json`` prints. ``final_states``: pods per last state (granted,
    queued, rejected, released, withdrawn); ``allocation_pct_over_time``: (trace hours, allocated
    GPU % of the replayed nodes); ``verified``: every intent decided and ``replay --verify`` ok;
    ``interrupted``: stopped early (Ctrl-C/SIGTERM) after releasing ``released_on_interrupt``
    live allocations; ``removed_nodes``: the replay's own nodes removed again at the end (with them
    its pool leaves the stack's totals)."""

    pods: int
    intents: int
    decided: int
    seconds: float
    speedup: float
    decisions_per_s: float
    latency_ms: dict[str, float]
    queue_wait_ms: dict[str, float]
    final_states: dict[str, int]
    multiple_outcomes: int
    allocation_pct_over_time: list[tuple[float, float]]
    verified: bool
    digest: str
    position: int
    problems: list[str] = []
    interrupted: bool = False
    released_on_interrupt: int = 0
    removed_nodes: int = 0

    def summary(self) -> str:
        """Human-readable lines."""
        peak = max((p for _, p in self.allocation_pct_over_time), default=0.0)
        lines = [
            f"{self.pods} pods, {self.intents} intents ({self.decided} decided) in {self.seconds:.1f}s "
            f"at speedup {self.speedup:g}: {self.decisions_per_s:.0f} decisions/s",
            f"intent-to-decision latency p50 {self.latency_ms['p50']:.1f} ms, p99 {self.latency_ms['p99']:.1f} ms",
            f"queue wait p50 {self.queue_wait_ms['p50']:.1f} ms, p99 {self.queue_wait_ms['p99']:.1f} ms "
            f"({int(self.queue_wait_ms['n'])} grants from the queue)",
            f"final states: {', '.join(f'{k} {v}' for k, v in sorted(self.final_states.items()))}; "
            f"peak allocated {peak:.1f} % of GPU",
            f"replay --verify: {'ok' if self.verified else 'FAILED'}, digest {self.digest}, position {self.position}",
        ]
        if self.interrupted:
            lines.append(f"interrupted: released or withdrew its {self.released_on_interrupt} live allocations")
        lines.append(f"cleaned up: removed its {self.removed_nodes} nodes (pool trace) again")
        lines += [f"problem: {p}" for p in self.problems]
        return "\n".join(lines)
