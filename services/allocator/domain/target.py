"""The target workload M a pool's fragmentation-aware strategy scores against, learned from the
pool's own recent requests.

Rule (a pure function of the state, so replays and restarts from a snapshot decide the same):
``evolve`` records the shape of every request that arrives in a pool (granted at once or
queued; :class:`~services.allocator.domain.model.RecentRequests`, the last :data:`KEPT`). The
learned M changes only when the pool's arrival count crosses a multiple of :data:`EPOCH`: it is
the typical pods (``plugins.workload.typical_workload``, the simulator's rule) of the last
:data:`WINDOW` shapes that had arrived at that crossing. A share in milli-TFLOPS is converted to
milli-GPU with the most common GPU capacity of the pool. Until the first :data:`EPOCH` requests
have arrived, the built-in prior (``plugins.workload.DEFAULT_WORKLOAD``, the openb mix) is used.
"""

from __future__ import annotations

from collections import Counter

from services.allocator.domain.model import RequestShape
from services.allocator.domain.plugins.fragmentation import MILLI_GPU, Workload
from services.allocator.domain.plugins.workload import DEFAULT_WORKLOAD, PodKey, typical_workload
from services.allocator.domain.state import ClusterState

WINDOW = 2000
"""Request shapes the learned mix is derived from."""
EPOCH = 1000
"""Arrivals between two derivations (the mix, and every cached rank, changes at most this often)."""
KEPT = WINDOW + EPOCH
"""Shapes a pool keeps: the window as of the last crossing plus the arrivals since."""


def pod_key(shape: RequestShape, capacity_milli_tflops: int) -> PodKey:
    """(cpu_milli, per-GPU milli-GPU, GPU count, models) of one request; a request with no GPU
    amount at all is CPU-only (count 0), like the trace's ``num_gpu = 0``."""
    if shape.milli_percent:
        milli = min(MILLI_GPU, -(-shape.milli_percent // 100))
    elif shape.milli_tflops and capacity_milli_tflops > 0:
        milli = min(MILLI_GPU, -(-shape.milli_tflops * MILLI_GPU // capacity_milli_tflops))
    else:
        milli = MILLI_GPU if shape.milli_tflops else 0
    count = shape.count if milli else 0
    return (shape.cpu_milli, milli, count, shape.models)


def window_at_crossing(shapes: list[RequestShape], arrivals: int) -> list[RequestShape]:
    """The last :data:`WINDOW` shapes as they were when ``arrivals`` last crossed a multiple of EPOCH."""
    end = len(shapes) - arrivals % EPOCH
    return shapes[max(0, end - WINDOW):end]


def common_capacity(state: ClusterState, pool: str) -> int:
    """The most common GPU TFLOPS capacity among the pool's GPUs (milli-TFLOPS; the largest on ties; 0: none)."""
    counts = Counter(state.gpus[g].spec.capacity.milli_tflops
                     for n in state.pool_nodes.get(pool, ()) for g in state.nodes[n].gpus)
    return max(counts, key=lambda c: (counts[c], c)) if counts else 0


class TargetMix:
    """Per pool, the learned M (memoised by arrival epoch and capacity), or one ``fixed`` M."""

    __slots__ = ("_capacity", "_mixes", "fixed")

    def __init__(self, *, fixed: Workload | None = None) -> None:
        self.fixed = fixed
        self._capacity: dict[str, tuple[int, int]] = {}
        self._mixes: dict[str, tuple[int, int, Workload]] = {}

    def for_pool(self, state: ClusterState, pool: str) -> Workload:
        """M for ``pool`` now (the same object while it does not change)."""
        if self.fixed is not None:
            return self.fixed
        recent = state.recent.get(pool)
        if recent is None or recent.arrivals < EPOCH:
            return DEFAULT_WORKLOAD
        epoch = recent.arrivals // EPOCH
        inventory = state.changes.inventory
        known = self._capacity.get(pool)
        if known is None or known[0] != inventory:
            known = self._capacity[pool] = (inventory, common_capacity(state, pool))
        capacity = known[1]
        cached = self._mixes.get(pool)
        if cached is not None and cached[0] == epoch and cached[1] == capacity:
            return cached[2]
        window = window_at_crossing(recent.shapes, recent.arrivals)
        mix = typical_workload(pod_key(s, capacity) for s in window)
        self._mixes[pool] = (epoch, capacity, mix)
        return mix
