"""``trace fairness``: the multi-tenant share experiment over gpuledger's pure domain, one run per
(policy, seed), on a simulated clock.

Per run: a fresh ClusterState and Scheduler, pool ``openb`` configured for the policy, the trace's
nodes registered, the policy's quotas or shares set, then the tenants' arrivals
(:mod:`services.trace.tenants`) and the releases of granted pods in time order (at equal times a
release goes first). Every arrival and every release is one intent through ``process`` (decide,
evolve, drain the waiting queue): one **decision batch**. A granted pod is released
``duration_s`` after its grant; a preempted pod is resubmitted at once under a new allocation id
(its controller recreates it) and runs its whole duration again. All requests have one priority
(QoS ``medium``), so every preemption is a reclaim, never a priority preemption.

Policies (:data:`POLICIES`):
- ``no-quotas``: no quota, no share: one pool for all (the utilisation reference).
- ``hard-quotas``: each namespace capped at its guarantee (GPUResourceQuota total requests
  milli-TFLOPS, TensorFusion's only tool): no borrowing.
- ``borrow``: one share per tenant (guaranteed milli-TFLOPS, weight), borrowing idle capacity,
  never reclaimed: the pool's ``reclaim_min_runtime_s`` is longer than any pod runs.
- ``reclaim``: shares, borrowing, and reclaim of borrowed allocations for a share below its
  guarantee (the domain's reclaim: only what is needed, in its victim order).
- ``fair-share``: ``reclaim`` with the pool's ``fair_share_half_life_s`` set
  (``Settings.half_life_s``): waiting requests ordered by decayed weighted dominant share.
- ``reclaim-all``: the reclaim-everything baseline: shares and borrowing, the domain's own reclaim
  off (as ``borrow``), and after any decision batch that leaves a share with a covered request
  waiting, every borrowed allocation of the other shares is released at once (whatever its
  runtime, priority or how much is needed) and resubmitted, the releases counted as preemptions
  and as part of that batch.

Measured in [``warmup_s``, ``horizon_s``) (:mod:`services.trace.share_metric`): utilisation
(allocated milli-GPU / capacity), per share the time below its guarantee while a request of it
waited that its guarantee covers, the time to restore it (per covered request that could not be
granted from free capacity at once, i.e. that waited or whose grant preempted: decision batches and
seconds from the batch that made it covered to its grant; 0 batches = in the same batch),
preemptions per hour, and Jain's index of weighted dominant shares among the shares with a waiting
request (when at least two have one).

A request is *covered by its guarantee* when it is in the longest prefix of its share's waiting
requests (in queue order) whose asks, added to the share's usage, stay within the guarantee; a
waiting request's ask in milli-TFLOPS is taken on the largest GPU it may use (its grant converts
its percent with the chosen GPU's capacity), so a covered request fits its guarantee wherever it
is placed.
"""

from __future__ import annotations

import heapq
import math
import statistics
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Literal, get_args

import msgspec

from events import decisions as ev
from events.intents import (
    AnyIntent,
    ConfigurePool,
    RegisterNode,
    ReleaseAllocation,
    RequestAllocation,
    SetQuota,
    SetShare,
)
from events.values import PoolConfig, QuotaAmount, QuotaSpec, ShareAmount, SharePool, ShareSpec
from services.allocator.domain import ClusterState, Scheduler, process
from services.trace.openb import TracePod
from services.trace.share_metric import Timeline, jain_index, percentile, weighted_dominant_shares
from services.trace.tenants import TENANTS, Arrival, Bursts, Tenant, arrivals

POOL = "openb"
START = datetime(2026, 1, 1, tzinfo=UTC)
SEEDS_FROM = 42

Policy = Literal["no-quotas", "hard-quotas", "borrow", "reclaim", "fair-share", "reclaim-all"]
SHARED: frozenset[str] = frozenset({"borrow", "reclaim", "fair-share", "reclaim-all"})
"""The policies that set shares."""
POLICIES: tuple[Policy, ...] = get_args(Policy)


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """A run's settings: simulated seconds, the unmeasured warm-up, placement strategy, the
    tenants' arrival process, and the fraction of the trace's nodes used (every k-th node,
    k = round(1 / scale), so the GPU model mix is kept)."""

    horizon_s: float = 12 * 3600.0
    warmup_s: float = 3600.0
    strategy: str = "node-compact-gpu-low-load"
    bursts: Bursts = Bursts()
    scale: float = 1.0
    half_life_s: int = 1800


class ShareFigures(msgspec.Struct, kw_only=True):
    """One share in one run: its guarantee (percent of milli-TFLOPS), time below it while a
    covered request waited (seconds and percent of the measured time), time-mean usage in percent
    of the pool's milli-TFLOPS, pods granted (resubmissions included) and pods preempted."""

    share: str
    guarantee_pct: int
    below_guarantee_s: float
    below_guarantee_pct: float
    mean_usage_pct: float
    granted: int
    preempted: int


class PolicyRun(msgspec.Struct, kw_only=True):
    """One (policy, seed) run's figures (see the module docstring for the definitions).

    ``restore_batches``/``restore_s``: p50, p99 and max over the covered requests granted in the
    window after waiting or by preempting (NaN when none; ``restored`` counts them,
    ``restore_late`` those restored more than one batch after they were covered);
    ``restore_open``: covered requests still waiting at the end; ``preemptions_per_hour``: all
    preemptions in the window per simulated hour (``reclaims``: those made to give a share back its
    guarantee); ``batches``: decision batches (intents processed); ``wall_s``: seconds the run took.
    """

    policy: str
    seed: int
    utilisation_pct: float
    jain: float
    jain_time_pct: float
    restore_batches: dict[str, float]
    restore_s: dict[str, float]
    restored: int
    restore_late: int
    restore_open: int
    preemptions: int
    reclaims: int
    preemptions_per_hour: float
    arrivals: int
    rejected: int
    batches: int
    wall_s: float
    shares: list[ShareFigures]


class _Job:
    """A pod's life in the run: tenant, pod, duration, the estimated ask (milli-TFLOPS), and,
    once granted, its charges (milli-GPU, milli-TFLOPS, VRAM bytes, GPUs)."""

    __slots__ = (
        "ask",
        "covered_at",
        "duration_s",
        "gpus",
        "granted",
        "milli_gpu",
        "pod",
        "queued",
        "tenant",
        "tflops",
        "vram",
    )

    def __init__(self, tenant: str, pod: TracePod, duration_s: int, ask: int) -> None:
        self.tenant, self.pod, self.duration_s, self.ask = tenant, pod, duration_s, ask
        self.covered_at: tuple[int, float] | None = None
        self.granted = self.queued = False
        self.milli_gpu = self.tflops = self.vram = self.gpus = 0


class _Usage:
    """A share's usage: milli-GPU, milli-TFLOPS, VRAM bytes, GPUs held, and the time integral of
    milli-TFLOPS over the window."""

    __slots__ = ("gpus", "milli_gpu", "tflops", "vram")

    def __init__(self) -> None:
        self.milli_gpu = self.tflops = self.vram = self.gpus = 0


def check_policy(name: str) -> Policy:
    """``name`` as a Policy; raises KeyError naming the known ones."""
    if name not in POLICIES:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    return name  # type: ignore[return-value]


def sample_nodes(nodes: Sequence[RegisterNode], scale: float) -> list[RegisterNode]:
    """Every k-th node of ``nodes`` (k = round(1 / scale)), moved into pool ``openb``.

    Raises ValueError when ``scale`` is not in (0, 1] or leaves no node.
    """
    if not 0 < scale <= 1:
        raise ValueError(f"scale: {scale} is not in (0, 1]")
    step = max(1, round(1 / scale))
    chosen = [msgspec.structs.replace(n, pool=POOL) for n in list(nodes)[::step]]
    if not chosen:
        raise ValueError(f"scale: {scale} leaves no node of {len(nodes)}")
    return chosen


def policy_intents(policy: Policy, tenants: Sequence[Tenant], *, pool_milli_tflops: int,
                   settings: Settings) -> list[AnyIntent]:
    """The pool's configuration and the quotas or shares ``policy`` sets before any arrival
    (guarantees: percent of ``pool_milli_tflops``, rounded down)."""
    config = PoolConfig(placement=settings.strategy)
    if policy in ("borrow", "reclaim-all"):  # no borrowed pod ever runs long enough to be reclaimed
        config = msgspec.structs.replace(config, reclaim_min_runtime_s=settings.bursts.max_duration_s + 1)
    elif policy == "fair-share":
        config = msgspec.structs.replace(config, fair_share_half_life_s=settings.half_life_s)
    out: list[AnyIntent] = [ConfigurePool(intent_id="pool", pool=POOL, config=config)]
    for t in tenants:
        guarantee = pool_milli_tflops * t.guarantee_pct // 100
        if policy == "hard-quotas":
            out.append(SetQuota(intent_id=f"quota-{t.namespace}", namespace=t.namespace,
                                spec=QuotaSpec(total_requests=QuotaAmount(milli_tflops=guarantee))))
        elif policy in SHARED:
            terms = SharePool(pool=POOL, guaranteed=ShareAmount(milli_tflops=guarantee))
            out.append(SetShare(intent_id=f"share-{t.share}", name=t.share,
                                spec=ShareSpec(namespaces=(t.namespace,), weight=t.weight, pools=(terms,))))
    return out


class _Run:
    """One run's simulation state: the domain's state, the jobs, the shares' usage and waiting
    requests, the timeline and the counters."""

    def __init__(self, nodes: Sequence[RegisterNode], policy: Policy, tenants: Sequence[Tenant],
                 settings: Settings) -> None:
        self.state = ClusterState.empty()
        self.scheduler = Scheduler()
        self.settings = settings
        self.policy = policy
        self.tenants = {t.share: t for t in tenants}
        for intent in nodes:
            process(self.state, msgspec.structs.replace(intent, pool=POOL), START, self.scheduler)
        gpus = list(self.state.gpus.values())
        self.capacity_milli = 1000 * len(gpus)
        self.capacity = (sum(g.spec.capacity.milli_tflops for g in gpus),
                         sum(g.spec.capacity.vram_bytes for g in gpus), len(gpus))
        self.guarantee = {t.share: self.capacity[0] * t.guarantee_pct // 100 for t in tenants}
        self._largest: dict[tuple[str, ...], int] = {}
        for setup in policy_intents(policy, tenants, pool_milli_tflops=self.capacity[0], settings=settings):
            process(self.state, setup, START, self.scheduler)
        self.jobs: dict[str, _Job] = {}
        self.usage = {t.share: _Usage() for t in tenants}
        self.waiting: dict[str, dict[str, _Job]] = {t.share: {} for t in tenants}
        self.covered: dict[str, int] = dict.fromkeys(self.tenants, 0)  # covered prefix length
        self.heap: list[tuple[float, int, int, str]] = []
        self.seq = 0
        self.batch = 0
        self.timeline = Timeline(start=settings.warmup_s, end=settings.horizon_s,
                                 capacity_milli=self.capacity_milli, shares=list(self.tenants))
        self.used_milli = 0
        self.restore_batches: list[int] = []
        self.restore_s: list[float] = []
        self.preemptions = 0
        self.reclaims = 0
        self.borrowed: dict[str, None] = {}  # granted borrowed allocations, in grant order
        self.rejected = 0
        self.granted = dict.fromkeys(self.tenants, 0)
        self.preempted = dict.fromkeys(self.tenants, 0)
        self.usage_area = dict.fromkeys(self.tenants, 0.0)
        self._last_t = 0.0

    def largest_tflops(self, models: tuple[str, ...]) -> int:
        """milli-TFLOPS of the largest GPU of the pool a request allowing ``models`` may use."""
        if models not in self._largest:
            caps = [g.spec.capacity.milli_tflops for g in self.state.gpus.values()
                    if not models or g.spec.model in models]
            self._largest[models] = max(caps, default=0)
        return self._largest[models]

    def push(self, at: float, order: int, aid: str) -> None:
        """Schedule a release (order 0) or an arrival (order 1) of ``aid`` at ``at`` seconds."""
        self.seq += 1
        heapq.heappush(self.heap, (at, order, self.seq, aid))

    def add(self, arrival: Arrival, aid: str) -> None:
        """Register ``arrival`` as job ``aid`` and schedule its arrival."""
        pod = arrival.pod
        ask = pod.count * pod.milli * self.largest_tflops(pod.models) // 1000
        self.jobs[aid] = _Job(arrival.tenant, pod, arrival.duration_s, ask)
        self.push(arrival.at, 1, aid)

    def intent(self, order: int, aid: str) -> AnyIntent:
        job = self.jobs[aid]
        ns = self.tenants[job.tenant].namespace
        if order == 0:
            return ReleaseAllocation(intent_id=f"rel-{aid}", allocation_id=aid, namespace=ns, pod=aid, pool=POOL,
                                     reason="finished")
        spec = msgspec.structs.replace(job.pod.spec(pool=POOL, allocation_id=aid, namespace=ns), qos="medium")
        return RequestAllocation(intent_id=f"req-{aid}", spec=spec)

    def step(self, at: float, order: int, aid: str) -> None:
        """One decision batch: the arrival or release of ``aid`` at ``at`` through ``process``."""
        job = self.jobs[aid]
        if order == 0 and not job.granted:
            return  # preempted before its end: its resubmission has its own release
        self._integrate(at)
        self.batch += 1
        if order == 1:
            self._cover_on_arrival(aid, job, at)
        events = process(self.state, self.intent(order, aid), START + timedelta(seconds=at), self.scheduler)
        touched: set[str] = {job.tenant}
        for e in events:
            self._apply(e, at, touched)
        for share in touched:
            self._cover(share, at)
        if self.policy == "reclaim-all" and (owed := self._below()):
            self._reclaim_all(owed, at)
        self.timeline.record(at, used_milli=self.used_milli, below=self._below(), jain=self._jain())

    def _reclaim_all(self, owed: frozenset[str], at: float) -> None:
        """Release every borrowed allocation of the shares not in ``owed`` and resubmit each (the
        reclaim-everything baseline), within the current batch."""
        victims = [aid for aid in self.borrowed if self.jobs[aid].tenant not in owed]
        touched: set[str] = set()
        for aid in victims:
            job = self.jobs[aid]
            intent = ReleaseAllocation(intent_id=f"reclaim-{aid}", allocation_id=aid,
                                       namespace=self.tenants[job.tenant].namespace, pod=aid, pool=POOL,
                                       reason="reclaim-all")
            for e in process(self.state, intent, START + timedelta(seconds=at), self.scheduler):
                self._apply(e, at, touched)
            self._lost(aid, job, at, reclaim=True)
            touched.add(job.tenant)
        for share in touched:
            self._cover(share, at)

    def _lost(self, aid: str, job: _Job, at: float, *, reclaim: bool) -> None:
        """Count ``aid``'s preemption and resubmit its pod under a new id at ``at``."""
        self.preempted[job.tenant] += 1
        if self.settings.warmup_s <= at < self.settings.horizon_s:
            self.preemptions += 1
            self.reclaims += reclaim
        again = f"{aid.split('.')[0]}.{self.seq}"  # a pod name: lowercase, digits, '-' and '.'
        self.jobs[again] = _Job(job.tenant, job.pod, job.duration_s, job.ask)
        self.push(at, 1, again)

    def _integrate(self, at: float) -> None:
        lo, hi = max(self._last_t, self.settings.warmup_s), min(at, self.settings.horizon_s)
        if hi > lo:
            for share, usage in self.usage.items():
                self.usage_area[share] += usage.tflops * (hi - lo)
        self._last_t = max(self._last_t, at)

    def _cover_on_arrival(self, aid: str, job: _Job, at: float) -> None:
        """Mark an arriving request covered when every waiting request of its share is and its ask
        still fits the guarantee after theirs."""
        waiting = self.waiting[job.tenant]
        if self.covered[job.tenant] < len(waiting):
            return
        asked = sum(w.ask for w in waiting.values())
        if self.usage[job.tenant].tflops + asked + job.ask <= self.guarantee[job.tenant]:
            job.covered_at = (self.batch, at)

    def _apply(self, e: ev.AnyEvent, at: float, touched: set[str]) -> None:
        match e:
            case ev.AllocationGranted():
                job = self.jobs[e.spec.allocation_id]
                self.waiting[job.tenant].pop(e.spec.allocation_id, None)
                job.granted = True
                if e.borrowed:
                    self.borrowed[e.spec.allocation_id] = None
                job.milli_gpu, job.gpus = job.pod.demand, len(e.gpus)
                job.tflops = sum(c.milli_tflops for c in e.charges)
                job.vram = sum(c.vram_bytes for c in e.charges)
                self._charge(e.spec.allocation_id, job, +1)
                self.granted[job.tenant] += 1
                if job.covered_at is not None:
                    batch, since = job.covered_at
                    if (job.queued or e.preempted) and self.settings.warmup_s <= at < self.settings.horizon_s:
                        self.restore_batches.append(self.batch - batch)
                        self.restore_s.append(at - since)
                    job.covered_at = None
                self.push(at + job.duration_s, 0, e.spec.allocation_id)
                touched.add(job.tenant)
            case ev.AllocationQueued():
                job = self.jobs[e.spec.allocation_id]
                self.waiting[job.tenant][e.spec.allocation_id] = job
                job.queued = True
                touched.add(job.tenant)
            case ev.AllocationRejected():
                job = self.jobs[e.spec.allocation_id]
                job.covered_at = None
                self.rejected += 1
            case ev.AllocationPreempted():
                job = self.jobs[e.allocation_id]
                self._charge(e.allocation_id, job, -1)
                self._lost(e.allocation_id, job, at, reclaim=e.reclaim)
                touched.add(job.tenant)
            case ev.AllocationReleased():
                job = self.jobs[e.allocation_id]
                if job.granted:
                    self._charge(e.allocation_id, job, -1)
                else:
                    self.waiting[job.tenant].pop(e.allocation_id, None)
                touched.add(job.tenant)
            case _:
                pass

    def _charge(self, aid: str, job: _Job, sign: int) -> None:
        """Add (+1) a granted job's charges to its share's usage and the pool's, or take them back (-1)."""
        if sign < 0:
            job.granted = False
            self.borrowed.pop(aid, None)
        usage = self.usage[job.tenant]
        usage.milli_gpu += sign * job.milli_gpu
        usage.tflops += sign * job.tflops
        usage.vram += sign * job.vram
        usage.gpus += sign * job.gpus
        self.used_milli += sign * job.milli_gpu

    def _cover(self, share: str, at: float) -> None:
        """Recompute ``share``'s covered prefix; newly covered requests start their clock now,
        requests that left it stop theirs."""
        headroom = self.guarantee[share] - self.usage[share].tflops
        before = self.covered[share]
        waiting = self.waiting[share]
        n = 0
        for i, job in enumerate(waiting.values()):
            if n == i and job.ask <= headroom:
                headroom -= job.ask
                n += 1
                if job.covered_at is None:
                    job.covered_at = (self.batch, at)
            elif i < before:
                job.covered_at = None
            else:
                break
        if len(waiting) > n:  # the newest request may have been covered on arrival
            next(reversed(waiting.values())).covered_at = None
        self.covered[share] = n

    def _below(self) -> frozenset[str]:
        return frozenset(s for s, n in self.covered.items() if n)

    def _jain(self) -> float | None:
        backlogged = [s for s, w in self.waiting.items() if w]
        if len(backlogged) < 2:
            return None
        usage = {s: (self.usage[s].tflops, self.usage[s].vram, self.usage[s].gpus) for s in backlogged}
        shares = weighted_dominant_shares(usage, self.capacity, {s: self.tenants[s].weight for s in backlogged})
        return jain_index(list(shares.values()))


def run_policy(nodes: Sequence[RegisterNode], pods: Sequence[TracePod], *, policy: Policy, seed: int,
               tenants: Sequence[Tenant] = TENANTS, settings: Settings = Settings()) -> PolicyRun:
    """One run of ``policy`` with ``seed`` (see the module docstring): the tenants' arrivals drawn
    from ``pods`` for the sampled nodes' capacity, then :func:`simulate`. Deterministic per seed.

    Raises ValueError on bad settings (scale, horizon, tenants) and KeyError on an unknown policy.
    """
    chosen = sample_nodes(nodes, settings.scale)
    capacity_milli = 1000 * sum(len(n.gpus) for n in chosen)
    drawn = arrivals(tenants, pods, capacity_milli=capacity_milli, horizon_s=settings.horizon_s, seed=seed,
                     bursts=settings.bursts)
    return simulate(chosen, drawn, policy=policy, seed=seed, tenants=tenants, settings=settings)


def simulate(nodes: Sequence[RegisterNode], drawn: Sequence[Arrival], *, policy: Policy, seed: int = 0,
             tenants: Sequence[Tenant] = TENANTS, settings: Settings = Settings()) -> PolicyRun:
    """Run ``policy`` on ``nodes`` (pool ``openb``) with the arrivals ``drawn`` (ids
    ``<share>-<i>``); ``seed`` is only recorded. ``settings.scale`` is not applied here.

    Raises ValueError when the warm-up is not in [0, horizon) and KeyError on an unknown policy.
    """
    check_policy(policy)
    if not 0 <= settings.warmup_s < settings.horizon_s:
        raise ValueError(f"warmup_s: {settings.warmup_s} is not in [0, horizon_s {settings.horizon_s})")
    started = time.perf_counter()
    run = _Run(nodes, policy, tenants, settings)
    for i, arrival in enumerate(drawn):
        run.add(arrival, f"{arrival.tenant}-{i}")
    while run.heap and run.heap[0][0] < settings.horizon_s:
        at, order, _, aid = heapq.heappop(run.heap)
        run.step(at, order, aid)
    run._integrate(settings.horizon_s)
    figures = run.timeline.finish()
    hours = figures.seconds / 3600
    shares = [ShareFigures(
        share=t.share, guarantee_pct=t.guarantee_pct, below_guarantee_s=round(figures.below_guarantee_s[t.share], 1),
        below_guarantee_pct=round(100 * figures.below_guarantee_s[t.share] / figures.seconds, 3),
        mean_usage_pct=round(100 * run.usage_area[t.share] / (figures.seconds * run.capacity[0]), 3),
        granted=run.granted[t.share], preempted=run.preempted[t.share]) for t in tenants]
    return PolicyRun(
        policy=policy, seed=seed, utilisation_pct=round(figures.utilisation_pct, 3), jain=round(figures.jain, 4),
        jain_time_pct=round(100 * figures.jain_seconds / figures.seconds, 2),
        restore_batches=_spread(run.restore_batches), restore_s=_spread(run.restore_s),
        restored=len(run.restore_s), restore_late=sum(1 for b in run.restore_batches if b > 1),
        restore_open=sum(1 for w in run.waiting.values() for j in w.values() if j.covered_at is not None),
        preemptions=run.preemptions, reclaims=run.reclaims, preemptions_per_hour=round(run.preemptions / hours, 2),
        arrivals=len(drawn),
        rejected=run.rejected, batches=run.batch, wall_s=round(time.perf_counter() - started, 2), shares=shares,
    )


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"p50": percentile(values, 50), "p99": percentile(values, 99), "max": max(values, default=float("nan"))}


class PolicySummary(msgspec.Struct, kw_only=True):
    """A policy's means over seeds (``by_seed`` keeps every run)."""

    policy: str
    seeds: int
    utilisation_pct: float
    utilisation_gap_pts: float
    jain: float
    below_guarantee_pct: dict[str, float]
    restore_batches_p50: float
    restore_batches_p99: float
    restore_batches_max: float
    restore_s_p50: float
    restore_s_p99: float
    restore_late: int
    restore_open: int
    preemptions_per_hour: float
    by_seed: list[PolicyRun]


def summarize(runs: Sequence[PolicyRun], *, reference: float | None) -> PolicySummary:
    """Means over the seeds of one policy's runs; ``utilisation_gap_pts`` is the reference's
    utilisation (no quotas) minus this one's, in points (NaN without a reference)."""
    def mean(values: Iterable[float]) -> float:
        kept = [v for v in values if v == v]  # NaN: no value that seed
        return round(statistics.fmean(kept), 4) if kept else float("nan")

    utilisation = mean(r.utilisation_pct for r in runs)
    return PolicySummary(
        policy=runs[0].policy, seeds=len(runs), utilisation_pct=utilisation,
        utilisation_gap_pts=round(reference - utilisation, 3) if reference is not None else float("nan"),
        jain=mean(r.jain for r in runs),
        below_guarantee_pct={s.share: mean(r.shares[i].below_guarantee_pct for r in runs)
                             for i, s in enumerate(runs[0].shares)},
        restore_batches_p50=mean(r.restore_batches["p50"] for r in runs),
        restore_batches_p99=mean(r.restore_batches["p99"] for r in runs),
        restore_batches_max=max((r.restore_batches["max"] for r in runs), default=float("nan")),
        restore_s_p50=mean(r.restore_s["p50"] for r in runs), restore_s_p99=mean(r.restore_s["p99"] for r in runs),
        restore_late=sum(r.restore_late for r in runs), restore_open=sum(r.restore_open for r in runs),
        preemptions_per_hour=mean(r.preemptions_per_hour for r in runs), by_seed=list(runs),
    )


def run(nodes: Sequence[RegisterNode], pods: Sequence[TracePod], *, policies: Sequence[str], seeds: int,
        tenants: Sequence[Tenant] = TENANTS, settings: Settings = Settings(),
        first_seed: int = SEEDS_FROM) -> list[PolicySummary]:
    """Every policy of ``policies`` over seeds first_seed…; the no-quotas reference is run too
    (first) when it is not asked for, to give the utilisation gap. Raises KeyError on an unknown policy."""
    chosen = [check_policy(p) for p in policies]
    reference_first: list[Policy] = ["no-quotas"] if "no-quotas" not in chosen else []
    order = reference_first + chosen
    out: dict[str, PolicySummary] = {}
    reference: float | None = None
    for policy in dict.fromkeys(order):
        runs = [run_policy(nodes, pods, policy=policy, seed=s, tenants=tenants, settings=settings)
                for s in range(first_seed, first_seed + seeds)]
        out[policy] = summarize(runs, reference=reference)
        if policy == "no-quotas":
            reference = out[policy].utilisation_pct
            out[policy].utilisation_gap_pts = 0.0
    return [out[p] for p in dict.fromkeys(chosen)]


def _finite(value: object) -> object:
    """``value`` (builtins) with every NaN float replaced by None, for strict JSON."""
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def to_json(results: Sequence[PolicySummary]) -> list[object]:
    """The summaries as JSON-ready builtins (NaN, "no value", as null)."""
    return [_finite(msgspec.to_builtins(r)) for r in results]


def _cell(value: float, digits: int = 1) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


def table(results: Sequence[PolicySummary]) -> str:
    """A text table, one row per policy: utilisation and its gap to no-quotas (points), per share the
    percent of time below guarantee with a covered request waiting, restore latency (batches
    p50/p99/max, seconds p50/p99), preemptions per hour, Jain's index."""
    shares = list(results[0].below_guarantee_pct) if results else []
    head = (f"{'policy':<12} {'util %':>7} {'gap':>5}  {'below guarantee % (' + '/'.join(shares) + ')':<30}"
            f" {'restore batches p50/p99/max (late)':>34} {'restore s p50/p99':>17} {'preempt/h':>9} {'Jain':>5}")
    lines = [head]
    for r in results:
        below = "/".join(_cell(v) for v in r.below_guarantee_pct.values())
        batches = "/".join(_cell(v, 0) for v in (r.restore_batches_p50, r.restore_batches_p99, r.restore_batches_max))
        batches += f" ({r.restore_late})"
        seconds = "/".join(_cell(v, 0) for v in (r.restore_s_p50, r.restore_s_p99))
        lines.append(f"{r.policy:<12} {_cell(r.utilisation_pct):>7} {_cell(r.utilisation_gap_pts):>5}  {below:<30}"
                     f" {batches:>34} {seconds:>17} {_cell(r.preemptions_per_hour):>9} {_cell(r.jain, 3):>5}")
    seeds = results[0].seeds if results else 0
    lines.append(f"(means over {seeds} seed(s); gap: no-quotas utilisation minus this policy's, in points; "
                 "late: restored more than one batch after the demand)")
    return "\n".join(lines)
