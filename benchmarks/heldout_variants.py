"""Held-out openb trace variants for testing placement strategies beyond data/openb (seeded).

Each variant perturbs the default trace (``openb_pod_list_default.csv``) along one axis the
ATC'23 paper varies, at settings that are not among the five traces in data/openb, or along an
axis it does not vary (CPU per GPU). Same seed → same pods. Shapes are always drawn from the
default trace's own pods, so only the mix changes:

- ``cpux150`` / ``cpux050``: every GPU pod's CPU × 1.5 / × 0.5 (CPU binds harder / hardly);
- ``cpuonly25``: CPU-only pods (default's shapes) added until they are 25 % of all pods;
- ``share70``: whole one-GPU pods turned into sharing pods (a share drawn from default's sharing
  pods) until sharing pods carry 70 % of GPU demand;
- ``multi40``: multi-GPU pods (default's shapes) added until they carry 40 % of GPU demand;
- ``spec25``: 25 % of GPU pods pinned to one model (drawn ∝ the model's GPUs in the cluster) or,
  for a third of them, to two models;
- ``mix``: CPU × 1.25, then share 50 %, then multi 25 %.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import msgspec

from services.trace.openb import TracePod

MODEL_GPUS = {"G2": 4392, "T4": 842, "G3": 312, "P100": 265, "V100M32": 204, "V100M16": 195, "A10": 2}
"""GPUs per model in openb_node_list_gpu_node.csv (pinning draws models in proportion)."""


def _scale_cpu(pods: Sequence[TracePod], factor: float) -> list[TracePod]:
    return [msgspec.structs.replace(p, cpu_milli=max(1, round(p.cpu_milli * factor))) if p.count else p
            for p in pods]


def _cpu_only(pods: Sequence[TracePod], rng: random.Random, fraction: float) -> list[TracePod]:
    shapes = [p for p in pods if not p.count]
    out = list(pods)
    while sum(1 for p in out if not p.count) < fraction * len(out):
        out.append(msgspec.structs.replace(rng.choice(shapes), name=f"cpu-extra-{len(out)}"))
    return out


def _share(pods: Sequence[TracePod], rng: random.Random, fraction: float) -> list[TracePod]:
    shares = [p.milli for p in pods if p.count == 1 and p.milli < 1000]
    out = list(pods)
    whole = [i for i, p in enumerate(out) if p.count == 1 and p.milli == 1000]
    rng.shuffle(whole)

    def shared() -> float:
        demand = sum(p.demand for p in out)
        return sum(p.demand for p in out if p.count == 1 and p.milli < 1000) / demand

    while whole and shared() < fraction:
        for i in whole[:50]:
            out[i] = msgspec.structs.replace(out[i], milli=rng.choice(shares))
        del whole[:50]
    return out


def _multi(pods: Sequence[TracePod], rng: random.Random, fraction: float) -> list[TracePod]:
    shapes = [p for p in pods if p.count > 1]
    out = list(pods)
    multi = sum(p.demand for p in out if p.count > 1)
    total = sum(p.demand for p in out)
    while multi < fraction * total:
        pod = msgspec.structs.replace(rng.choice(shapes), name=f"multi-extra-{len(out)}")
        out.append(pod)
        multi += pod.demand
        total += pod.demand
    return out


def _pin(pods: Sequence[TracePod], rng: random.Random, fraction: float) -> list[TracePod]:
    models, weights = list(MODEL_GPUS), list(MODEL_GPUS.values())
    out = list(pods)
    gpu = [i for i, p in enumerate(out) if p.count]
    for i in rng.sample(gpu, round(fraction * len(gpu))):
        pinned = set(rng.choices(models, weights, k=2 if rng.random() < 1 / 3 else 1))
        out[i] = msgspec.structs.replace(out[i], models=tuple(sorted(pinned)))
    return out


VARIANTS: dict[str, Callable[[Sequence[TracePod], random.Random], list[TracePod]]] = {
    "cpux150": lambda pods, rng: _scale_cpu(pods, 1.5),
    "cpux050": lambda pods, rng: _scale_cpu(pods, 0.5),
    "cpuonly25": lambda pods, rng: _cpu_only(pods, rng, 0.25),
    "share70": lambda pods, rng: _share(pods, rng, 0.70),
    "multi40": lambda pods, rng: _multi(pods, rng, 0.40),
    "spec25": lambda pods, rng: _pin(pods, rng, 0.25),
    "mix": lambda pods, rng: _multi(_share(_scale_cpu(pods, 1.25), rng, 0.50), rng, 0.25),
}
"""Held-out variant name → generator over the default trace's pods."""


def variant(name: str, default: Sequence[TracePod], *, seed: int = 2023) -> list[TracePod]:
    """The pods of held-out variant ``name``; raises KeyError for an unknown name."""
    return VARIANTS[name](sorted(default, key=lambda p: p.name), random.Random(f"{name}-{seed}"))
