"""The ATC'23 fill-up experiment over gpuledger's pure domain (``process``), one run per seed.

Per seed: a fresh ClusterState and Scheduler, the pool configured with the strategy, the nodes
registered in a seeded tie-break order, the workload tuned to 130 % of GPU capacity, then one
RequestAllocation per pod in order, no departures. A grant counts as allocated; a queued or
rejected request counts as failed (its demand still arrives). The placement code is the live
allocator's: the Scheduler is built with the trace's typical pods as the fixed target workload
of workload-aware strategies (FGD and its kin), the paper's setting, instead of learning it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import msgspec

from events.decisions import AllocationGranted
from events.intents import ConfigurePool, RegisterNode, RequestAllocation
from events.values import AllocationSpec, PoolConfig
from services.allocator.domain import ClusterState, Scheduler, process, profile
from services.allocator.domain.strategies.fragmentation import Workload
from services.trace.metric import REPORT_POINTS, unallocated_curve
from services.trace.openb import TracePod
from services.trace.workload import node_order, tune, typical

POOL = "openb"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
SEEDS_FROM = 42
"""The paper's seeds are 42…51."""


class SeedRun(msgspec.Struct, kw_only=True):
    """One seed's records: milli-GPU arrived and allocated after each attempt, and timing."""

    seed: int
    capacity_milli: int
    arrived: list[int]
    used: list[int]
    seconds: float

    def curve(self) -> dict[int, float]:
        """Unallocated % at every arrived % 0-130."""
        return unallocated_curve(self.arrived, self.used, capacity_milli=self.capacity_milli)


class Result(msgspec.Struct, kw_only=True):
    """What ``trace experiment --json`` prints (means over seeds; by-seed values alongside)."""

    strategy: str
    trace: str
    seeds: int
    unallocated_pct: dict[str, float]
    unallocated_pct_by_seed: dict[str, list[float]]
    decisions_per_s: float
    curve_median: dict[str, float] = {}


def check_strategy(name: str) -> None:
    """Raise KeyError naming the registered strategies when ``name`` is not one of them."""
    if name not in profile.STRATEGIES:
        raise KeyError(f"unknown strategy {name!r}; known: {', '.join(sorted(profile.STRATEGIES))}")


def prepared(nodes: Sequence[RegisterNode], *, strategy: str, seed: int, target: Workload
             ) -> tuple[ClusterState, Scheduler]:
    """A fresh state with pool ``openb`` placed by ``strategy`` (preemption off) and ``nodes``
    registered in the seed's tie-break order, and its Scheduler with ``target`` fixed."""
    state = ClusterState.empty()
    scheduler = Scheduler(target=target)
    config = PoolConfig(placement=strategy, preemption="off")
    process(state, ConfigurePool(intent_id="pool", pool=POOL, config=config), NOW, scheduler)
    for intent in node_order(nodes, seed=seed):
        process(state, msgspec.structs.replace(intent, pool=POOL), NOW, scheduler)
    return state, scheduler


def arrive(state: ClusterState, scheduler: Scheduler, pods: Sequence[TracePod], *, first: int = 0,
           before: Callable[[ClusterState, AllocationSpec], None] | None = None) -> list[bool]:
    """Request ``pods`` in order (the i-th as ``r<first+i>``, allocation ``<first+i>-<name>``);
    per pod whether it was granted."""
    out: list[bool] = []
    for i, pod in enumerate(pods, start=first):
        spec = pod.spec(pool=POOL, allocation_id=f"{i}-{pod.name}")
        if before is not None:
            before(state, spec)
        events = process(state, RequestAllocation(intent_id=f"r{i}", spec=spec), NOW, scheduler)
        out.append(isinstance(events[0], AllocationGranted))
    return out


def records(pods: Sequence[TracePod], granted: Sequence[bool]) -> tuple[list[int], list[int]]:
    """Cumulative milli-GPU arrived and allocated after each attempt of ``pods``."""
    arrived_total = used_total = 0
    arrived: list[int] = []
    used: list[int] = []
    for pod, ok in zip(pods, granted, strict=True):
        arrived_total += pod.demand
        used_total += pod.demand if ok else 0
        arrived.append(arrived_total)
        used.append(used_total)
    return arrived, used


def run_seed(nodes: Sequence[RegisterNode], pods: Sequence[TracePod], *, strategy: str, seed: int,
             target: Workload, before: Callable[[ClusterState, AllocationSpec], None] | None = None) -> SeedRun:
    """One fill-up run through ``process`` with a Scheduler whose target workload is ``target``;
    ``before`` (a benchmark's probe) sees the state and each request just before it is decided.

    Preemption is off: the paper's simulator never evicts, and the trace's LS pods (QoS high)
    would otherwise preempt BE pods (medium) once the cluster is full."""
    state, scheduler = prepared(nodes, strategy=strategy, seed=seed, target=target)
    capacity = 1000 * len(state.gpus)
    tuned = tune(pods, capacity_milli=capacity, seed=seed)
    started = time.perf_counter()
    granted = arrive(state, scheduler, tuned, before=before)
    seconds = time.perf_counter() - started
    arrived, used = records(tuned, granted)
    return SeedRun(seed=seed, capacity_milli=capacity, arrived=arrived, used=used, seconds=seconds)


def run(nodes: Sequence[RegisterNode], pods: Sequence[TracePod], *, strategy: str, seeds: int,
        trace: str = "", first_seed: int = SEEDS_FROM) -> tuple[Result, list[SeedRun]]:
    """``seeds`` runs (seeds first_seed…) of ``strategy``; the summary and the per-seed records.

    Raises KeyError for an unknown strategy.
    """
    check_strategy(strategy)
    target = typical(pods)
    runs = [run_seed(nodes, pods, strategy=strategy, seed=seed, target=target)
            for seed in range(first_seed, first_seed + seeds)]
    return summarize(runs, strategy=strategy, trace=trace), runs


def summarize(runs: Sequence[SeedRun], *, strategy: str, trace: str) -> Result:
    """Means over seeds at 100/110/130 % arrived, the per-seed values and the median curve."""
    curves = [r.curve() for r in runs]
    by_seed = {str(x): [round(c[x], 4) for c in curves if x in c] for x in REPORT_POINTS}
    means = {x: round(statistics.fmean(v), 4) for x, v in by_seed.items() if v}
    median = {str(x): round(statistics.median(c[x] for c in curves), 4)
              for x in range(131) if all(x in c for c in curves)}
    attempts = sum(len(r.arrived) for r in runs)
    seconds = sum(r.seconds for r in runs)
    return Result(strategy=strategy, trace=trace, seeds=len(runs), unallocated_pct=means,
                  unallocated_pct_by_seed=by_seed, decisions_per_s=round(attempts / seconds, 1) if seconds else 0.0,
                  curve_median=median)
