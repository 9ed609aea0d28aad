"""The tenants of ``trace fairness``: shares with guarantees and seeded on/off bursty arrivals of openb pods.

Each tenant is one namespace in one share, with a guarantee (percent of the pool's milli-TFLOPS)
and a weight for the surplus. Its arrivals follow an on/off process (the usual model of bursty
cluster tenants): ON and OFF periods are exponential with means ``on_mean_s``/``off_mean_s``;
while ON, pods arrive as a Poisson process whose offered load is ``burst`` × its guarantee of the
pool's GPU capacity (so a tenant that is ON wants more than it is guaranteed, and borrows when
others are OFF). Pods are drawn with replacement from the trace's GPU pods; each keeps its shape
(GPU count, milli-GPU per GPU, models, CPU, memory) and runs for its trace duration
(deletion_time - creation_time) clipped to [``min_duration_s``, ``max_duration_s``], from its
grant. Everything is drawn from ``random.Random`` seeded per (seed, tenant): same seed, same arrivals.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

import msgspec

from services.trace.openb import TracePod

DEFAULT_DURATION_S = 1800
"""Duration of a pod whose row has no creation/deletion time (e.g. openb_pod_list_multigpu20)."""


class Tenant(msgspec.Struct, frozen=True, kw_only=True):
    """One tenant: its share's name, its namespace, its guarantee in percent of the pool's
    milli-TFLOPS (0-100) and its weight (1-1000, the share's weight for the surplus)."""

    share: str
    namespace: str
    guarantee_pct: int
    weight: int


TENANTS: tuple[Tenant, ...] = (
    Tenant(share="a", namespace="team-a", guarantee_pct=40, weight=4),
    Tenant(share="b", namespace="team-b", guarantee_pct=30, weight=3),
    Tenant(share="c", namespace="team-c", guarantee_pct=20, weight=2),
    Tenant(share="d", namespace="team-d", guarantee_pct=10, weight=1),
)
"""The default tenants: guarantees 40/30/20/10 % of the pool, weights in the same proportion."""


class Bursts(msgspec.Struct, frozen=True, kw_only=True):
    """The on/off arrival process: mean ON and OFF period (seconds), the offered load while ON as
    a multiple of the tenant's guarantee, and the clip of pod durations (seconds)."""

    on_mean_s: float = 7200.0
    off_mean_s: float = 7200.0
    burst: float = 2.0
    min_duration_s: int = 60
    max_duration_s: int = 4 * 3600


class Arrival(msgspec.Struct, frozen=True, kw_only=True):
    """A pod of ``tenant`` (its namespace) arriving at ``at`` seconds, running ``duration_s`` once granted."""

    at: float
    tenant: str
    pod: TracePod
    duration_s: int


def duration_of(pod: TracePod, bursts: Bursts) -> int:
    """The pod's trace duration in seconds, clipped to the bursts' [min, max] (DEFAULT_DURATION_S
    when the row has no times)."""
    raw = DEFAULT_DURATION_S if pod.created is None or pod.deleted is None else pod.deleted - pod.created
    return min(bursts.max_duration_s, max(bursts.min_duration_s, raw))


def check_tenants(tenants: Sequence[Tenant]) -> None:
    """Raise ValueError naming the field when tenants are empty, repeat a share or namespace,
    have a guarantee outside 0-100 or summing above 100, or a weight outside 1-1000."""
    if not tenants:
        raise ValueError("tenants: at least one is needed")
    for field in ("share", "namespace"):
        names = [getattr(t, field) for t in tenants]
        if len(set(names)) != len(names):
            raise ValueError(f"tenants.{field}: repeated in {names}")
    for t in tenants:
        if not 0 <= t.guarantee_pct <= 100:
            raise ValueError(f"tenants.guarantee_pct: {t.guarantee_pct} of share {t.share} is not in 0-100")
        if not 1 <= t.weight <= 1000:
            raise ValueError(f"tenants.weight: {t.weight} of share {t.share} is not in 1-1000")
    total = sum(t.guarantee_pct for t in tenants)
    if total > 100:
        raise ValueError(f"tenants.guarantee_pct: the guarantees sum to {total} %, above 100 %")


def arrivals(tenants: Sequence[Tenant], pods: Sequence[TracePod], *, capacity_milli: int, horizon_s: float,
             seed: int, bursts: Bursts = Bursts()) -> list[Arrival]:
    """Every tenant's arrivals in [0, ``horizon_s``), sorted by (time, tenant); ``capacity_milli`` is
    the pool's GPU capacity in milli-GPU. CPU-only pods are not drawn.

    The ON arrival rate of a tenant is burst × guarantee × capacity / E[milli-GPU × seconds] of a
    drawn pod. A tenant starts ON with probability on / (on + off). Raises ValueError when there
    is no GPU pod to draw from, or a tenant is invalid (:func:`check_tenants`).
    """
    check_tenants(tenants)
    gpu_pods = sorted((p for p in pods if p.count), key=lambda p: p.name)
    if not gpu_pods:
        raise ValueError("pods: the trace has no GPU pod to draw from")
    durations = [duration_of(p, bursts) for p in gpu_pods]
    work = statistics.fmean(p.demand * d for p, d in zip(gpu_pods, durations, strict=True))
    out: list[Arrival] = []
    for tenant in tenants:
        rng = random.Random(f"fairness-{seed}-{tenant.share}")
        rate = bursts.burst * tenant.guarantee_pct / 100 * capacity_milli / work  # pods per second while ON
        if rate <= 0:
            continue
        on = rng.random() < bursts.on_mean_s / (bursts.on_mean_s + bursts.off_mean_s)
        t = 0.0
        while t < horizon_s:
            period = rng.expovariate(1 / (bursts.on_mean_s if on else bursts.off_mean_s))
            end = min(horizon_s, t + period)
            if on:
                at = t + rng.expovariate(rate)
                while at < end:
                    i = rng.randrange(len(gpu_pods))
                    out.append(Arrival(at=round(at, 3), tenant=tenant.share, pod=gpu_pods[i],
                                       duration_s=durations[i]))
                    at += rng.expovariate(rate)
            t, on = end, not on
    out.sort(key=lambda a: (a.at, a.tenant))
    return out
