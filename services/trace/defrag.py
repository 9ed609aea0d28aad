"""The ATC'23 fill-up experiment with one consolidation at 100 % arrived (``trace experiment --defrag``).

Per seed, on the experiment's simulated cluster (:mod:`services.trace.experiment`): the tuned pods
arrive in order up to the last one that keeps the arrived GPU demand within 100 % of capacity; the
state is then copied (a snapshot) once per budget. Without defrag the arrivals go on to the end
(130 %) on the original state, so that run is exactly ``trace experiment``'s. With a budget of
``b`` % the copy gets a fresh Scheduler (same fixed target workload), the consolidation planner
(services/allocator/domain/consolidation.py, objective ``fragmentation`` unless told otherwise)
plans at most ``max(1, ⌊b/100 × granted allocations⌋)`` moves, the plan's execution events are
folded (release on the source, grant on the target), and the same remaining pods arrive.

Reported per run: unallocated GPU % (the paper's metric, at 100/110/130 % arrived), requests
accepted (all, and those arriving after the consolidation), the moves made (count and % of the
granted allocations) and the FGD fragmentation F(M) before and after the moves (milli-GPU).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence

import msgspec

from events.intents import RegisterNode
from services.allocator.domain import Scheduler, decode_snapshot, encode_snapshot, evolve
from services.allocator.domain.consolidation import MAX_MOVES, Budget, Objective, execution, plan
from services.allocator.domain.model import GRANTED
from services.allocator.domain.strategies.fragmentation import Workload
from services.trace.experiment import NOW, POOL, SEEDS_FROM, arrive, check_strategy, prepared, records
from services.trace.metric import REPORT_POINTS, cluster_fragmentation, unallocated_curve
from services.trace.openb import TracePod
from services.trace.workload import tune, typical


class DefragRun(msgspec.Struct, frozen=True, kw_only=True):
    """One seed and one budget (``budget_pct`` 0: no defrag). Counts are requests (pods, CPU-only
    included); ``moved_pct`` is ``moves`` over ``allocations`` (granted at the consolidation) × 100;
    ``frag_before``/``frag_after`` are F(M) in milli-GPU under the trace's typical workload;
    ``unallocated_pct`` maps arrived % (100/110/130) to unallocated GPU %; seconds are the plan's
    and the whole branch's (plan, execution and the arrivals after it; without defrag, the fill
    and every arrival)."""

    seed: int
    budget_pct: float
    requests: int
    requests_after: int
    accepted: int
    accepted_after: int
    allocations: int
    moves: int
    moved_pct: float
    frag_before: float
    frag_after: float
    unallocated_pct: dict[str, float]
    plan_seconds: float = 0.0
    seconds: float = 0.0


class DefragResult(msgspec.Struct, frozen=True, kw_only=True):
    """What ``trace experiment --defrag --json`` prints per strategy, trace and budget: means over
    seeds of the run's figures with the same seed's no-defrag run beside them. ``gain_requests``:
    extra requests accepted (mean over seeds); ``gain_accepted_pct``: that as % of the requests the
    no-defrag run accepted; ``gain_unallocated_points``: unallocated GPU % at 130 % arrived, no-defrag
    minus defrag (positive: defrag left less GPU unallocated); the ``_per_pct_moved`` figures divide
    the gains by ``moved_pct``, the figure no scheduler publishes."""

    strategy: str
    trace: str
    objective: str
    budget_pct: float
    seeds: int
    requests: float
    moved_pct: float
    moves: float
    accepted: float
    accepted_pct: float
    accepted_without: float
    accepted_pct_without: float
    unallocated_pct: dict[str, float]
    unallocated_pct_without: dict[str, float]
    frag_before: float
    frag_after: float
    gain_requests: float
    gain_accepted_pct: float
    gain_unallocated_points: float
    gain_requests_per_pct_moved: float
    gain_unallocated_points_per_pct_moved: float
    plan_seconds: float
    runs: list[DefragRun] = []


def parse_budget(text: str) -> float:
    """``"1%"``, ``"5"`` or ``"0.5 %"`` → 1.0, 5.0, 0.5 (percent of allocations moved).

    Raises ValueError naming the value unless it is a number in (0, 100]."""
    raw = text.strip().removesuffix("%").strip()
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"defrag budget {text!r} is not a percentage (e.g. 1% or 5%)") from None
    if not 0 < value <= 100 or math.isnan(value):
        raise ValueError(f"defrag budget {text!r} must be a percentage above 0 and at most 100")
    return value


def split_at_full(pods: Sequence[TracePod], capacity_milli: int) -> int:
    """How many of ``pods`` arrive before the consolidation: the longest prefix whose GPU demand
    is at most ``capacity_milli`` (100 % arrived)."""
    total = 0
    for i, pod in enumerate(pods):
        total += pod.demand
        if total > capacity_milli:
            return i
    return len(pods)


def max_moves(budget_pct: float, allocations: int) -> int:
    """The moves a budget of ``budget_pct`` % of ``allocations`` allows: at least 1, at most MAX_MOVES."""
    return min(MAX_MOVES, max(1, math.floor(budget_pct * allocations / 100)))


def run_seed(nodes: Sequence[RegisterNode], pods: Sequence[TracePod], *, strategy: str, seed: int,
             target: Workload, budgets_pct: Sequence[float], objective: Objective = "fragmentation"
             ) -> list[DefragRun]:
    """The no-defrag run then one run per budget in ``budgets_pct`` (the module docstring)."""
    state, scheduler = prepared(nodes, strategy=strategy, seed=seed, target=target)
    capacity = 1000 * len(state.gpus)
    tuned = tune(pods, capacity_milli=capacity, seed=seed)
    split = split_at_full(tuned, capacity)
    head, tail = tuned[:split], tuned[split:]
    started = time.perf_counter()
    filled = arrive(state, scheduler, head)
    full = encode_snapshot(state)
    allocations = sum(1 for a in state.allocations.values() if a.status == GRANTED and a.spec.pool == POOL)
    frag = round(cluster_fragmentation(state, target).frag_milli, 1)

    def result(budget: float, rest: list[bool], moves: int, frag_after: float, plan_s: float, s: float) -> DefragRun:
        arrived, used = records(tuned, filled + rest)
        curve = unallocated_curve(arrived, used, capacity_milli=capacity)
        return DefragRun(seed=seed, budget_pct=budget, requests=len(tuned), requests_after=len(tail),
                         accepted=sum(filled) + sum(rest), accepted_after=sum(rest), allocations=allocations,
                         moves=moves, moved_pct=round(100 * moves / allocations, 4) if allocations else 0.0,
                         frag_before=frag, frag_after=frag_after,
                         unallocated_pct={str(x): round(curve[x], 4) for x in REPORT_POINTS if x in curve},
                         plan_seconds=round(plan_s, 3), seconds=round(s, 3))

    out = [result(0.0, arrive(state, scheduler, tail, first=split), 0, frag, 0.0, time.perf_counter() - started)]
    for budget in budgets_pct:
        started = time.perf_counter()
        copy = decode_snapshot(full)
        fresh = Scheduler(target=target)
        chosen = plan(copy, POOL, Budget(max_moves=max_moves(budget, allocations)), NOW, fresh, objective=objective)
        plan_s = time.perf_counter() - started
        for event in execution(copy, chosen, NOW):
            evolve(copy, event)
        after = round(cluster_fragmentation(copy, target).frag_milli, 1)
        rest = arrive(copy, fresh, tail, first=split)
        out.append(result(budget, rest, len(chosen.moves), after, plan_s, time.perf_counter() - started))
    return out


def run(nodes: Sequence[RegisterNode], pods: Sequence[TracePod], *, strategy: str, seeds: int,
        budgets_pct: Sequence[float], trace: str = "", first_seed: int = SEEDS_FROM,
        objective: Objective = "fragmentation") -> list[DefragResult]:
    """``seeds`` seeds of ``strategy``, one :class:`DefragResult` per budget (in order).

    Raises KeyError for an unknown strategy."""
    check_strategy(strategy)
    target = typical(pods)
    by_seed = [run_seed(nodes, pods, strategy=strategy, seed=s, target=target, budgets_pct=budgets_pct,
                        objective=objective) for s in range(first_seed, first_seed + seeds)]
    return [summarize([runs[0] for runs in by_seed], [runs[k] for runs in by_seed], strategy=strategy, trace=trace,
                      objective=objective) for k in range(1, len(budgets_pct) + 1)]


def summarize(without: Sequence[DefragRun], runs: Sequence[DefragRun], *, strategy: str, trace: str,
              objective: str) -> DefragResult:
    """Means over seeds of ``runs`` (one budget) beside the same seeds' no-defrag runs ``without``."""
    def mean(values: Sequence[float]) -> float:
        return round(statistics.fmean(values), 4)

    def unallocated(rs: Sequence[DefragRun]) -> dict[str, float]:
        return {k: mean([r.unallocated_pct[k] for r in rs]) for k in rs[0].unallocated_pct}

    moved = mean([r.moved_pct for r in runs])
    gain = mean([r.accepted - w.accepted for r, w in zip(runs, without, strict=True)])
    gain_pct = mean([100 * (r.accepted - w.accepted) / w.accepted if w.accepted else 0.0
                     for r, w in zip(runs, without, strict=True)])
    last = str(REPORT_POINTS[-1])
    points = mean([w.unallocated_pct.get(last, 0.0) - r.unallocated_pct.get(last, 0.0)
                   for r, w in zip(runs, without, strict=True)])
    return DefragResult(
        strategy=strategy, trace=trace, objective=objective, budget_pct=runs[0].budget_pct, seeds=len(runs),
        requests=mean([r.requests for r in runs]), moved_pct=moved, moves=mean([r.moves for r in runs]),
        accepted=mean([r.accepted for r in runs]), accepted_pct=mean([100 * r.accepted / r.requests for r in runs]),
        accepted_without=mean([w.accepted for w in without]),
        accepted_pct_without=mean([100 * w.accepted / w.requests for w in without]),
        unallocated_pct=unallocated(runs), unallocated_pct_without=unallocated(without),
        frag_before=mean([r.frag_before for r in runs]), frag_after=mean([r.frag_after for r in runs]),
        gain_requests=gain, gain_accepted_pct=gain_pct, gain_unallocated_points=points,
        gain_requests_per_pct_moved=round(gain / moved, 4) if moved else 0.0,
        gain_unallocated_points_per_pct_moved=round(points / moved, 4) if moved else 0.0,
        plan_seconds=mean([r.plan_seconds for r in runs]), runs=list(runs))
