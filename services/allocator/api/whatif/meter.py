"""What one run of a what-if replay measured: utilisation over time, fragmentation, outcomes,
queue waits, preemptions, gang timeouts and each request's fate.

Fed after every replayed intent with its events and the run's state (``Meter.observe``); memory is
bounded by the window's requests (one small :class:`Fate` each) and a series of at most
:data:`SERIES_POINTS` points (halved when full). Units: seconds, milli-TFLOPS, percent of the pool.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

import msgspec

from events import decisions as ev
from services.allocator.domain.model import MISSING
from services.allocator.domain.state import ClusterState
from services.allocator.domain.strategies.fragmentation import node_fragment
from services.allocator.domain.strategies.paper import cpu_free, free_milli
from services.allocator.domain.target import mix_of

SERIES_POINTS = 2000
"""Most points kept in a run's series; when full, every other point is dropped and the spacing doubles."""

FRAG_EVERY = 1000
"""Intents between two fragmentation samples (plus one at the start and one at the end): the FGD
measure walks every node of the pool, too dear after every intent on a large pool."""

Outcome = Literal["granted", "waiting", "rejected", "left", "preempted"]
"""A request's fate at the window's end: granted (and still held or released normally), still
waiting in the queue, rejected, left the queue (released while queued, or its gang timed out),
or preempted after being granted."""


class Fate(msgspec.Struct, kw_only=True, gc=False):
    """One request of the window: when it came (seconds after the window start), what became of
    it, how long it waited in the queue (seconds; 0 when granted at once), its node and the reason
    of its last wait, rejection or preemption."""

    namespace: str
    pod: str
    pool: str
    requested_s: float
    outcome: Outcome = "waiting"
    wait_s: float | None = None
    node: str = ""
    reason: str = ""

    def text(self) -> str:
        """The fate in words (``granted after 30 s on node-3``)."""
        match self.outcome:
            case "granted":
                waited = "at once" if not self.wait_s else f"after {seconds_text(self.wait_s)}"
                return f"granted {waited} on {self.node}"
            case "waiting":
                return f"still waiting at the window's end ({self.reason})"
            case "rejected":
                return f"rejected ({self.reason})"
            case "left":
                return f"left the queue after {seconds_text(self.wait_s or 0)} ({self.reason})"
        return f"preempted on {self.node} ({self.reason})"

    def same(self, other: Fate) -> bool:
        """Whether two runs gave this request the same fate (outcome and wait; the node may differ)."""
        return self.outcome == other.outcome and _close(self.wait_s, other.wait_s)


def _close(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and abs(a - b) < 1e-6)


def seconds_text(seconds: float) -> str:
    """Seconds in human units: ``45 s``, ``12.5 min``, ``3.2 h``, ``2.1 d``."""
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    if seconds < 172800:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86400:.3g} d"


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """Nearest-rank p50/p95/p99 of ``values`` (seconds) and their count; zeros when empty."""
    ordered = sorted(values)
    out: dict[str, float] = {"count": len(ordered)}
    for name, p in (("p50", 50), ("p95", 95), ("p99", 99)):
        out[name] = ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] if ordered else 0.0
    return out


class Summary(msgspec.Struct, kw_only=True):
    """A run's figures over the window (what the report prints and ``--json`` carries)."""

    gpu_utilisation_pct: float
    tflops_utilisation_pct: float
    fragmentation_pct_of_free: float
    stranded_gpus: float
    requests: dict[str, int]
    wait_s: dict[str, float]
    wait_s_by_namespace: dict[str, dict[str, float]]
    preemptions: int
    gang_timeouts: int


class Meter:
    """The measures of one run over pool ``pool`` (None: every pool) from ``start`` (the window's start)."""

    def __init__(self, state: ClusterState, pool: str | None, start: datetime) -> None:
        self.pool, self.start = pool, start
        self.fates: dict[str, Fate] = {}
        self.counts = {"granted": 0, "queued": 0, "rejected": 0}
        self.preemptions = self.gang_timeouts = 0
        self.series: list[tuple[float, float, float, int]] = []
        self._spacing = 0.0
        self._busy: dict[str, tuple[int, int, int]] = {}  # GPU -> (busy 0/1, used, capacity milli-TFLOPS)
        self._node_gpus: dict[str, list[str]] = {}
        self._busy_gpus = self._used_milli = self._gpus = self._capacity_milli = 0
        self._waiting: set[str] = {a.spec.allocation_id for a in state.allocations.values()
                                   if a.status != "granted" and self._mine(a.spec.pool)}
        self._last_s = 0.0
        self._integral = [0.0, 0.0, 0.0, 0.0]  # busy GPU·s, GPU·s, used milli-TFLOPS·s, capacity milli-TFLOPS·s
        self._frag: list[tuple[float, float]] = []  # (stranded milli-GPU, free milli-GPU) per sample
        self._intents = 0
        self._recount(state)
        self._sample_frag(state)
        self._point(0.0)

    def _mine(self, pool: str) -> bool:
        return self.pool is None or pool == self.pool

    def _recount(self, state: ClusterState) -> None:
        self._busy.clear()
        self._node_gpus.clear()
        self._busy_gpus = self._used_milli = self._gpus = self._capacity_milli = 0
        for node in state.nodes:
            self._count_node(state, node)

    def _count_node(self, state: ClusterState, node: str) -> None:
        """Take ``node``'s GPUs out of the totals, then put back what the state now holds of them."""
        for name in self._node_gpus.pop(node, ()):
            busy, used, capacity = self._busy.pop(name)
            self._busy_gpus -= busy
            self._used_milli -= used
            self._capacity_milli -= capacity
            self._gpus -= 1
        found = state.nodes.get(node)
        if found is None or not self._mine(found.pool):
            return
        mine = []
        for name in found.gpus:
            gpu = state.gpus.get(name)
            if gpu is None or gpu.phase == MISSING:
                continue
            entry = (1 if gpu.charges else 0, gpu.used_milli_tflops, gpu.spec.capacity.milli_tflops)
            self._busy[name] = entry
            mine.append(name)
            self._busy_gpus += entry[0]
            self._used_milli += entry[1]
            self._capacity_milli += entry[2]
            self._gpus += 1
        self._node_gpus[node] = mine

    def totals(self) -> tuple[int, int, int, int]:
        """Now: (GPUs holding an allocation, allocated milli-TFLOPS, GPUs, capacity milli-TFLOPS) of the pool."""
        return self._busy_gpus, self._used_milli, self._gpus, self._capacity_milli

    def _touch(self, state: ClusterState, gpus: Sequence[str]) -> None:
        for name in gpus:
            old = self._busy.get(name)
            gpu = state.gpus.get(name)
            if old is None or gpu is None:
                continue
            new = (1 if gpu.charges else 0, gpu.used_milli_tflops, old[2])
            self._busy[name] = new
            self._busy_gpus += new[0] - old[0]
            self._used_milli += new[1] - old[1]

    def _sample_frag(self, state: ClusterState) -> None:
        stranded = free = 0.0
        for node in state.nodes.values():
            if not self._mine(node.pool):
                continue
            members = [state.gpus[n] for n in node.gpus if n in state.gpus and state.gpus[n].phase != MISSING]
            if not members:
                continue
            frees = [free_milli(g) for g in members]
            free += sum(frees)
            stranded += node_fragment(frees, cpu_free=cpu_free(node), model=members[0].spec.model,
                                      workload=mix_of(state, node.pool))
        self._frag.append((stranded, free))

    def _seconds(self, at: datetime) -> float:
        return (at - self.start).total_seconds()

    def _advance(self, t: float) -> None:
        dt = max(0.0, t - self._last_s)
        self._integral[0] += self._busy_gpus * dt
        self._integral[1] += self._gpus * dt
        self._integral[2] += self._used_milli * dt
        self._integral[3] += self._capacity_milli * dt
        self._last_s = max(self._last_s, t)

    def _point(self, t: float, *, force: bool = False) -> None:
        if self.series and not force and t - self.series[-1][0] < self._spacing:
            return
        gpu_pct = 100 * self._busy_gpus / self._gpus if self._gpus else 0.0
        tflops_pct = 100 * self._used_milli / self._capacity_milli if self._capacity_milli else 0.0
        self.series.append((round(t, 3), round(gpu_pct, 3), round(tflops_pct, 3), len(self._waiting)))
        if len(self.series) >= SERIES_POINTS:
            self.series = self.series[::2]
            self._spacing = max(self._spacing * 2, (self.series[-1][0] - self.series[0][0]) / SERIES_POINTS)

    def request(self, spec_id: str, namespace: str, pod: str, pool: str, at: datetime) -> None:
        """A request of the window arrives (before its events are observed)."""
        if self._mine(pool):
            self.fates[spec_id] = Fate(namespace=namespace, pod=pod, pool=pool, requested_s=self._seconds(at))

    def observe(self, state: ClusterState, events: Sequence[ev.AnyEvent], at: datetime, *,
                request_id: str = "") -> None:
        """Fold one intent's ``events`` (decided at ``at``; ``request_id``: the allocation id when the
        intent was a request) into the measures; ``state`` is the run's state after them."""
        t = self._seconds(at)
        self._advance(t)
        touched: list[str] = []
        nodes: set[str] = set()
        for e in events:
            match e:
                case ev.AllocationGranted():
                    touched.extend(e.gpus)
                    self._granted(e, t, own=e.spec.allocation_id == request_id)
                case ev.AllocationQueued():
                    self._queued(e, own=e.spec.allocation_id == request_id)
                case ev.AllocationRejected():
                    self._rejected(e, own=e.spec.allocation_id == request_id)
                case ev.AllocationReleased():
                    touched.extend(e.gpus)
                    self._released(e, t)
                case ev.AllocationPreempted():
                    touched.extend(e.gpus)
                    if self._mine(e.pool):
                        self.preemptions += 1
                        fate = self.fates.get(e.allocation_id)
                        if fate is not None:
                            fate.outcome, fate.reason = "preempted", f"by {e.preemptor_namespace}/{e.preemptor_pod}"
                case ev.AllocationResized():
                    allocation = state.allocations.get(e.allocation_id)
                    touched.extend(allocation.gpus if allocation is not None else ())
                case ev.GangTimedOut():
                    if any(w in self.fates or w in self._waiting for w in e.waiting):
                        self.gang_timeouts += 1
                case ev.NodeRegistered() | ev.NodeRemoved() | ev.GpuCapacityChanged() | ev.GpuPhaseChanged():
                    nodes.add(e.node)
        self._touch(state, touched)
        for node in nodes:
            self._count_node(state, node)
        self._intents += 1
        if self._intents % FRAG_EVERY == 0:
            self._sample_frag(state)
        self._point(t)

    def _granted(self, e: ev.AllocationGranted, t: float, *, own: bool) -> None:
        aid = e.spec.allocation_id
        self._waiting.discard(aid)
        fate = self.fates.get(aid)
        if own and self._mine(e.spec.pool):
            self.counts["granted"] += 1
        if fate is not None:
            fate.outcome, fate.node = "granted", e.node
            fate.wait_s = max(0.0, t - fate.requested_s)

    def _queued(self, e: ev.AllocationQueued, *, own: bool) -> None:
        if not self._mine(e.spec.pool):
            return
        self._waiting.add(e.spec.allocation_id)
        if own:
            self.counts["queued"] += 1
        fate = self.fates.get(e.spec.allocation_id)
        if fate is not None:
            fate.reason = e.reason

    def _rejected(self, e: ev.AllocationRejected, *, own: bool) -> None:
        if own and self._mine(e.spec.pool):
            self.counts["rejected"] += 1
        fate = self.fates.get(e.spec.allocation_id)
        if fate is not None:
            fate.outcome, fate.reason = "rejected", e.reason

    def _released(self, e: ev.AllocationReleased, t: float) -> None:
        self._waiting.discard(e.allocation_id)
        fate = self.fates.get(e.allocation_id)
        if fate is not None and e.was_queued and fate.outcome == "waiting":
            fate.outcome, fate.wait_s = "left", max(0.0, t - fate.requested_s)
            fate.reason = fate.reason or e.reason or "released while queued"

    def summary(self, end: datetime, state: ClusterState) -> Summary:
        """Close the measures at ``end`` (the window's end) and summarise them."""
        t = max(self._seconds(end), self._last_s)
        self._advance(t)
        self._sample_frag(state)
        if self.series[-1][0] != round(t, 3):
            self._point(t, force=True)
        waits: list[float] = []
        by_ns: dict[str, list[float]] = {}
        for fate in self.fates.values():
            if fate.outcome == "rejected":
                continue
            if fate.outcome == "waiting":
                fate.wait_s = max(0.0, t - fate.requested_s)
            wait = fate.wait_s or 0.0
            waits.append(wait)
            by_ns.setdefault(fate.namespace, []).append(wait)
        stranded = sum(s for s, _ in self._frag) / len(self._frag)
        free = sum(f for _, f in self._frag) / len(self._frag)
        gi, g, ui, u = self._integral
        return Summary(
            gpu_utilisation_pct=round(100 * gi / g, 3) if g else self.series[-1][1],
            tflops_utilisation_pct=round(100 * ui / u, 3) if u else self.series[-1][2],
            fragmentation_pct_of_free=round(100 * stranded / free, 3) if free else 0.0,
            stranded_gpus=round(stranded / 1000, 3),
            requests={**self.counts, "waiting_at_end": sum(1 for f in self.fates.values() if f.outcome == "waiting")},
            wait_s=percentiles(waits),
            wait_s_by_namespace={ns: percentiles(v) for ns, v in sorted(by_ns.items())},
            preemptions=self.preemptions, gang_timeouts=self.gang_timeouts)
