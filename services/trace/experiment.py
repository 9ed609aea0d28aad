"""The ATC'23 fill-up experiment over gpuledger's pure domain (``process``), one run per seed.

Per seed: a fresh ClusterState, the pool configured with the strategy, the nodes registered in
a seeded tie-break order, the workload tuned to 130 % of GPU capacity, then one
RequestAllocation per pod in order, no departures. A grant counts as allocated; a queued or
rejected request counts as failed (its demand still arrives). Strategies that take a target
workload (FGD and its kin, ``with_workload``) get the trace's typical pods for the run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

import msgspec

from events.decisions import AllocationGranted
from events.intents import ConfigurePool, RegisterNode, RequestAllocation
from events.values import PoolConfig
from services.allocator.domain import ClusterState, process, profile
from services.allocator.domain.plugins.fragmentation import Workload
from services.trace.choosers import CHOOSERS, make_chooser
from services.trace.engine import ArrayCluster, run_pods
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
    engine: str = "domain"
    curve_median: dict[str, float] = {}


@contextmanager
def installed(name: str, workload: Workload) -> Iterator[None]:
    """Register a fresh instance of strategy ``name`` bound to ``workload`` for the duration.

    Raises KeyError for an unknown strategy name.
    """
    if name not in profile.STRATEGIES:
        raise KeyError(f"unknown strategy {name!r}; known: {', '.join(sorted(profile.STRATEGIES))}")
    old = profile.STRATEGIES[name]
    bind = getattr(old, "with_workload", None)
    profile.register_strategy(bind(workload) if bind else old)
    try:
        yield
    finally:
        profile.register_strategy(old)


def run_seed(nodes: Sequence[RegisterNode], pods: Sequence[TracePod], *, strategy: str, seed: int) -> SeedRun:
    """One fill-up run through ``process``; ``strategy`` must already be installed."""
    state = ClusterState.empty()
    process(state, ConfigurePool(intent_id="pool", pool=POOL, config=PoolConfig(placement=strategy)), NOW)
    for intent in node_order(nodes, seed=seed):
        process(state, msgspec.structs.replace(intent, pool=POOL), NOW)
    capacity = 1000 * len(state.gpus)
    arrived_total = used_total = 0
    arrived: list[int] = []
    used: list[int] = []
    started = time.perf_counter()
    for i, pod in enumerate(tune(pods, capacity_milli=capacity, seed=seed)):
        spec = pod.spec(pool=POOL, allocation_id=f"{i}-{pod.name}")
        events = process(state, RequestAllocation(intent_id=f"r{i}", spec=spec), NOW)
        arrived_total += pod.demand
        if isinstance(events[0], AllocationGranted):
            used_total += pod.demand
        arrived.append(arrived_total)
        used.append(used_total)
    return SeedRun(seed=seed, capacity_milli=capacity, arrived=arrived, used=used,
                   seconds=time.perf_counter() - started)


def run_seed_array(nodes: Sequence[RegisterNode], pods: Sequence[TracePod], *, strategy: str, seed: int,
                   workload: Workload) -> SeedRun:
    """The same run on the array engine (services/trace/engine.py); raises KeyError when the
    engine does not implement ``strategy``."""
    cluster = ArrayCluster(node_order(nodes, seed=seed))
    chooser = make_chooser(strategy, cluster, workload)
    tuned = tune(pods, capacity_milli=cluster.capacity_milli, seed=seed)
    started = time.perf_counter()
    arrived, used, _ = run_pods(cluster, tuned, chooser)
    return SeedRun(seed=seed, capacity_milli=cluster.capacity_milli, arrived=arrived, used=used,
                   seconds=time.perf_counter() - started)


def engine_for(strategy: str, engine: str) -> str:
    """``domain`` or ``array``: ``auto`` picks the array engine when it implements ``strategy``.

    Raises ValueError for an unknown engine, or ``array`` with a strategy it lacks.
    """
    if engine == "auto":
        return "array" if strategy in CHOOSERS else "domain"
    if engine == "array" and strategy not in CHOOSERS:
        raise ValueError(f"the array engine does not implement {strategy!r}; it has {', '.join(sorted(CHOOSERS))}")
    if engine not in ("array", "domain"):
        raise ValueError(f"unknown engine {engine!r}; expected auto, array or domain")
    return engine


def run(nodes: Sequence[RegisterNode], pods: Sequence[TracePod], *, strategy: str, seeds: int,
        trace: str = "", first_seed: int = SEEDS_FROM, engine: str = "auto") -> tuple[Result, list[SeedRun]]:
    """``seeds`` runs (seeds first_seed…) of ``strategy``; the summary and the per-seed records.

    Raises KeyError for an unknown strategy, ValueError for a bad engine choice.
    """
    chosen = engine_for(strategy, engine)
    workload = typical(pods)
    runs = []
    with installed(strategy, workload):
        for seed in range(first_seed, first_seed + seeds):
            if chosen == "array":
                runs.append(run_seed_array(nodes, pods, strategy=strategy, seed=seed, workload=workload))
            else:
                runs.append(run_seed(nodes, pods, strategy=strategy, seed=seed))
    result = summarize(runs, strategy=strategy, trace=trace)
    result.engine = chosen
    return result, runs


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
