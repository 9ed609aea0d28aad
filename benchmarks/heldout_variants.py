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
- ``mix``: CPU × 1.25, then share 50 %, then multi 25 %; ``mix2``: CPU × 0.75, share 40 %,
  multi 35 %, then 10 % pinned.

Names are ``<axis><percent>`` (``cpux150``, ``share55``, ...), so any setting can be generated.
"""

from __future__ import annotations

import random
import re
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


AXES: dict[str, Callable[[Sequence[TracePod], random.Random, float], list[TracePod]]] = {
    "cpux": lambda pods, rng, x: _scale_cpu(pods, x),
    "cpuonly": _cpu_only,
    "share": _share,
    "multi": _multi,
    "spec": _pin,
}
"""Axis prefix → generator; the name's digits are the setting in % (``cpux150``: CPU × 1.50)."""

HELD_OUT = ("cpux150", "cpux050", "cpuonly25", "share70", "multi40", "spec25", "mix")
"""The first held-out set (development: fgd-strand's measure was chosen on it, docs/placement.md)."""
FRESH = ("cpux125", "cpux075", "cpuonly15", "share55", "multi30", "spec15", "mix2")
"""The second held-out set, generated after the measure was fixed (test only)."""


def variant(name: str, default: Sequence[TracePod], *, seed: int = 2023) -> list[TracePod]:
    """The pods of held-out variant ``name`` (``<axis><percent>``, ``mix`` or ``mix2``).

    Raises KeyError for an unknown name.
    """
    pods = sorted(default, key=lambda p: p.name)
    rng = random.Random(f"{name}-{seed}")
    if name == "mix":
        return _multi(_share(_scale_cpu(pods, 1.25), rng, 0.50), rng, 0.25)
    if name == "mix2":
        return _pin(_multi(_share(_scale_cpu(pods, 0.75), rng, 0.40), rng, 0.35), rng, 0.10)
    match = re.fullmatch(r"([a-z]+?)(\d+)", name)
    if not match or match[1] not in AXES:
        raise KeyError(f"unknown held-out variant {name!r}")
    return AXES[match[1]](pods, rng, int(match[2]) / 100)
