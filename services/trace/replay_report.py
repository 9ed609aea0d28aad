"""The report of ``trace replay``: throughput, latency and queue-wait percentiles, final states of
the pods, allocated GPU % over trace time, and the verification of the log."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50/p99 of ``values`` (seconds) in milliseconds, nearest-rank; zeros when empty."""
    if not values:
        return {"p50": 0.0, "p99": 0.0, "n": 0}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return round(1000 * ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))], 2)

    return {"p50": rank(0.50), "p99": rank(0.99), "n": len(ordered)}


class ReplayReport(msgspec.Struct, kw_only=True):
    """What ``trace replay --json`` prints. ``final_states``: pods per last state (granted,
    queued, rejected, released, withdrawn); ``allocation_pct_over_time``: (trace hours, allocated
    GPU % of the replayed nodes); ``verified``: every intent decided and ``replay --verify`` ok."""

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
        lines += [f"problem: {p}" for p in self.problems]
        return "\n".join(lines)
