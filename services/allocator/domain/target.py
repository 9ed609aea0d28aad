"""The target workload M a pool's fragmentation-aware strategy scores against, learned from the
pool's own recent requests.

Rule (a record of the projection, so replays and restarts from a snapshot decide the same):
``evolve`` records the shape of every request that arrives in a pool (granted at once or
queued; :class:`~services.allocator.domain.model.RecentRequests`, the last :data:`WINDOW`).
Each time the pool's arrival count reaches a multiple of :data:`EPOCH`, the typical pods of the
window (``strategies.workload.typical_workload``, the simulator's rule; a share in milli-TFLOPS is
converted to milli-GPU with the pool's most common GPU capacity; ``pod_key``) are compared with the pool's
current M, and adopted when they moved by more than :data:`SHIFT` (total variation distance,
the share of the load that changed class). So sampling noise of a steady workload does not
reshuffle every cached rank, while a real shift is followed within one epoch. Until a mix is
adopted the built-in prior (``strategies.workload.DEFAULT_WORKLOAD``, the openb mix) is M.
"""

from __future__ import annotations

from collections import Counter

from events.values import Resources
from services.allocator.domain.model import RecentRequests, RequestShape
from services.allocator.domain.state import ClusterState
from services.allocator.domain.strategies.fragmentation import MILLI_GPU, Workload
from services.allocator.domain.strategies.workload import DEFAULT_WORKLOAD, PodKey, typical_workload_of

WINDOW = 5000
"""Request shapes kept per pool; the learned mix is derived from them."""
EPOCH = 1000
"""Arrivals between two derivations."""
SHIFT = 0.15
"""Total variation distance beyond which a derived mix replaces the current one: a change of M
re-ranks every cached request shape of the pool (one scan each), so noise must not trigger it."""


def pod_key(shape: RequestShape, capacity: Resources) -> PodKey:
    """(cpu_milli, per-GPU milli-GPU, GPU count, models) of one request, measured against
    ``capacity``, the pool's most common GPU (milli-TFLOPS, bytes).

    The share is the compute asked (milli-percent, or milli-TFLOPS over the capacity); a request
    asking VRAM only takes its VRAM over the capacity's; ``shared`` isolation takes whole GPUs.
    Shares are rounded up to the next milli-GPU and capped at one GPU; an amount the capacity
    cannot measure (0) counts as a whole GPU. A request with no GPU amount at all is CPU-only
    (count 0), like the trace's ``num_gpu = 0`` and the strategies' ``cpu_only`` test.
    """
    if shape.whole:
        milli = MILLI_GPU
    elif shape.milli_percent:
        milli = _share(shape.milli_percent, 100 * MILLI_GPU)
    elif shape.milli_tflops:
        milli = _share(shape.milli_tflops, capacity.milli_tflops)
    elif shape.vram_bytes:
        milli = _share(shape.vram_bytes, capacity.vram_bytes)
    else:
        milli = 0
    count = shape.count if milli else 0
    return (shape.cpu_milli, milli, count, shape.models)


def _share(asked: int, capacity: int) -> int:
    """``asked`` of ``capacity`` in milli-GPU, rounded up, in [1, MILLI_GPU] (MILLI_GPU: no capacity)."""
    return min(MILLI_GPU, -(-asked * MILLI_GPU // capacity)) if capacity > 0 else MILLI_GPU


def common_capacity(state: ClusterState, pool: str) -> Resources:
    """The most common GPU capacity among the pool's GPUs (the largest on ties; zero: no GPU).

    Kept in ``state.common_capacity`` until the inventory changes (only NodeRegistered,
    NodeRemoved and a GPU's new capacity change a pool's GPUs, and each counts in
    ``changes.inventory``): a walk of every GPU of the pool (24,848 at 4x openb: ~15 ms) once per
    inventory change instead of once per epoch."""
    inventory = state.changes.inventory
    kept = state.common_capacity.get(pool)
    if kept is not None and kept[0] == inventory:
        return kept[1]
    counts = Counter(state.gpus[g].spec.capacity
                     for n in state.pool_nodes.get(pool, ()) for g in state.nodes[n].gpus)
    found = max(counts, key=lambda c: (counts[c], c.milli_tflops, c.vram_bytes)) if counts else Resources()
    state.common_capacity[pool] = (inventory, found)
    return found


def distance(a: Workload, b: Workload) -> float:
    """Total variation distance of two workloads over their classes (0: same mix, 1: disjoint)."""
    weights: dict[tuple[int, int, int, tuple[str, ...]], list[float]] = {}
    for k, mix in enumerate((a, b)):
        for t in mix:
            weights.setdefault((t.milli, t.count, t.cpu_milli, t.models), [0.0, 0.0])[k] += t.weight
    return sum(abs(x - y) for x, y in weights.values()) / 2


def learned(state: ClusterState, pool: str, recent: RecentRequests) -> Workload | None:
    """The mix to adopt at an epoch crossing, or None to keep the current one."""
    capacity = common_capacity(state, pool)
    pods: dict[PodKey, int] = {}  # each distinct shape measured once; keys in order of first appearance
    for shape, n in Counter(recent.shapes[-WINDOW:]).items():
        key = pod_key(shape, capacity)
        pods[key] = pods.get(key, 0) + n
    fresh = typical_workload_of(pods)
    current = recent.mix if recent.mix is not None else DEFAULT_WORKLOAD
    return fresh if distance(fresh, current) > SHIFT else None


def mix_of(state: ClusterState, pool: str) -> Workload:
    """M for ``pool`` now: its adopted mix, else the prior (the same object while it does not change)."""
    recent = state.recent.get(pool)
    return recent.mix if recent is not None and recent.mix is not None else DEFAULT_WORKLOAD
