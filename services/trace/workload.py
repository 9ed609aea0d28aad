"""The paper's workload preparation per seed (simulator ``simulator.go``).

``tune``: sort the pods by name, shuffle them, then resample with replacement up to ``ratio`` ×
GPU capacity (stopping at the first draw whose per-GPU milli would pass the target) or drop
random pods until the demand is under it; a trace without GPU demand is only shuffled.
``node_order``: a random but fixed tie-break order, given as ``%04d-`` name prefixes from a
permutation. ``typical`` builds FGD's target workload M.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import msgspec

from events.intents import RegisterNode
from services.allocator.domain.strategies.fragmentation import Workload
from services.allocator.domain.strategies.workload import typical_workload
from services.trace.openb import TracePod

TUNE_RATIO = 1.3
"""Target GPU demand as a multiple of capacity (``-tune 1.3``)."""


def tune(pods: Sequence[TracePod], *, capacity_milli: int, seed: int, ratio: float = TUNE_RATIO) -> list[TracePod]:
    """Shuffled pods resampled (copies named ``<name>-t<i>``) or trimmed to ``ratio`` × capacity.

    ``capacity_milli`` and the target are milli-GPU; a pod's GPU demand is ``count × milli``.
    Resampling stops at the first draw whose *per-GPU* ``milli`` would pass the target, while the
    total grows by the copy's whole demand: the simulator's ``tuneUpPods`` compares
    ``podTotalMilliGpuReq + MilliGpu`` and adds ``TotalMilliGpu``. Kept so that a seed tunes the
    trace as the paper's runs did; the total can so pass the target by at most
    ``(count - 1) × milli`` of the last copy, and trimming leaves it at or under the target.

    A trace without GPU demand (empty, or CPU-only pods only) comes back shuffled and otherwise
    as is: no draw could ever reach the target (the simulator panics on it instead).
    """
    rng = random.Random(seed)
    original = sorted(pods, key=lambda p: p.name)
    order = list(original)
    rng.shuffle(order)
    if not any(p.demand for p in original):
        return order
    target = ratio * capacity_milli
    total = sum(p.demand for p in order)
    if total < target:
        copies = 0
        while True:
            pod = original[rng.randrange(len(original))]
            if total + pod.milli > target:
                break
            order.append(msgspec.structs.replace(pod, name=f"{pod.name}-t{copies}"))
            copies += 1
            total += pod.demand
        return order
    while total > target and order:
        total -= order.pop(rng.randrange(len(order))).demand
    return order


def node_order(nodes: Sequence[RegisterNode], *, seed: int) -> list[RegisterNode]:
    """Nodes renamed ``%04d-<name>`` from a seeded permutation of the name-sorted list.

    The domain breaks ties by node name, so the prefix is the per-seed tie-break order of the
    simulator (its ``rand.Perm`` over nodes). GPU names keep their node's new prefix.
    """
    rng = random.Random(f"nodes-{seed}")
    ordered = sorted(nodes, key=lambda n: n.node)
    perm = list(range(len(ordered)))
    rng.shuffle(perm)
    out = []
    for rank, intent in zip(perm, ordered, strict=True):
        name = f"{rank:04d}-{intent.node}"
        gpus = tuple(msgspec.structs.replace(g, name=f"{rank:04d}-{g.name}") for g in intent.gpus)
        out.append(msgspec.structs.replace(intent, intent_id=f"{intent.intent_id}-{rank}", node=name, gpus=gpus))
    return out


def typical(pods: Sequence[TracePod]) -> Workload:
    """FGD's target workload M from the original (untuned) trace, CPU-only pods included."""
    return typical_workload((p.cpu_milli, p.milli, p.count, p.models) for p in pods)
