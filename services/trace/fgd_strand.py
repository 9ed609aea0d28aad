"""The array engine's fgd-strand chooser (plugins/fgd_strand.py on numpy arrays).

Per request class (share, count, CPU) it caches each node's FGD score, its stranding increase
max(0, ΔS_n(M)) and FGD's GPU slot for a share, recomputed only for nodes whose version changed.
The choice: the highest FGD score, then the least stranding increase, then the lowest node index
(tie order).
Decision-for-decision equal to the domain (tests/unit/trace/test_fgd_strand.py).
"""

from __future__ import annotations

import numpy as np

from services.allocator.domain.plugins.fgd_strand import integer_weights
from services.allocator.domain.plugins.fragmentation import Workload
from services.trace.engine import ArrayCluster, ClassArrays, Floats, Ints, fragment_rows, sigmoid_score
from services.trace.openb import TracePod

Choice = tuple[int, list[int]]


def stranded_rows(free: Ints, cpu: Ints, model: Ints, classes: ClassArrays, weights: Ints) -> Ints:
    """S_n(M) per row (plugins/fgd_strand.stranded), exact int64 in milli-GPU × 2²⁰."""
    share = np.maximum(classes.milli, 1)
    count = np.maximum(classes.count, 1)
    by_gpu = (free[:, None, :] // share[None, :, None]).sum(axis=2) // count[None, :]
    by_cpu = np.where(classes.cpu[None, :] > 0, cpu[:, None] // np.maximum(classes.cpu, 1)[None, :], by_gpu)
    lost = classes.count * classes.milli * np.maximum(0, by_gpu - by_cpu)
    lost = np.where(classes.admits[model] & classes.gpu_class[None, :], lost, 0)
    result: Ints = (lost * weights[None, :]).sum(axis=1)
    return result


class _Cached:
    __slots__ = ("score", "slot", "strand", "version")

    def __init__(self, size: int) -> None:
        self.version: Ints = np.full(size, -1, dtype=np.int64)
        self.score: Ints = np.zeros(size, dtype=np.int64)
        self.strand: Ints = np.zeros(size, dtype=np.int64)
        self.slot: Ints = np.zeros(size, dtype=np.int64)


class FgdStrand:
    """Chooser for ``fgd-strand`` on ``cluster`` against the target workload ``workload``."""

    def __init__(self, cluster: ArrayCluster, workload: Workload) -> None:
        self.cluster = cluster
        self.arrays = ClassArrays(workload, cluster.model_names)
        self.weights: Ints = np.array(integer_weights(workload), dtype=np.int64)
        self.classes: dict[tuple[int, int, int], _Cached] = {}

    def _after(self, pod: TracePod, free: Ints, before: Floats, after_cpu: Ints, model: Ints
               ) -> tuple[Floats, Ints, Ints]:
        """FGD's Δ, the free milli after FGD's placement, and FGD's slot for a share."""
        slot = np.zeros(free.shape[0], dtype=np.int64)
        if pod.count == 0:
            return fragment_rows(free, after_cpu, model, self.arrays) - before, free, slot
        if pod.count > 1 or pod.milli >= 1000:
            fit = free >= pod.milli
            take = fit & (np.cumsum(fit, axis=1) <= pod.count)
            after = free - pod.milli * take
            return fragment_rows(after, after_cpu, model, self.arrays) - before, after, slot
        width = free.shape[1]
        trial = np.repeat(free[:, None, :], width, axis=1)
        idx = np.arange(width)
        trial[:, idx, idx] -= pod.milli
        frag = fragment_rows(trial.reshape(-1, width), np.repeat(after_cpu, width),
                             np.repeat(model, width), self.arrays).reshape(-1, width)
        deltas = frag - before[:, None]
        deltas[free < pod.milli] = np.inf
        slot = np.argmin(deltas, axis=1)
        rows = np.arange(free.shape[0])
        after = free.copy()
        after[rows, slot] -= pod.milli
        return deltas[rows, slot], after, slot

    def _refresh(self, pod: TracePod, nodes: Ints, cache: _Cached) -> None:
        c = self.cluster
        free, cpu, model = c.free[nodes], c.cpu[nodes], c.model[nodes]
        after_cpu = cpu - pod.cpu_milli
        delta, after, slot = self._after(pod, free, fragment_rows(free, cpu, model, self.arrays), after_cpu, model)
        cache.strand[nodes] = np.maximum(0, stranded_rows(after, after_cpu, model, self.arrays, self.weights)
                                         - stranded_rows(free, cpu, model, self.arrays, self.weights))
        cache.slot[nodes] = slot
        cache.score[nodes] = [sigmoid_score(float(d)) for d in delta]
        cache.version[nodes] = c.version[nodes]

    def __call__(self, pod: TracePod, allocation_id: str, fe: Ints) -> Choice:
        """The feasible node with FGD's best score and the least (clipped) stranding increase, and its slots."""
        key = (pod.milli, pod.count, pod.cpu_milli)
        cache = self.classes.get(key) or self.classes.setdefault(key, _Cached(len(self.cluster.names)))
        stale = fe[cache.version[fe] != self.cluster.version[fe]]
        if stale.size:
            self._refresh(pod, stale, cache)
        scores = cache.score[fe]
        tied = fe[scores == scores.max()]
        node = int(tied[int(np.argmin(cache.strand[tied]))])
        if pod.count == 1 and pod.milli < 1000:
            return node, [int(cache.slot[node])]
        return node, self.cluster.default_slots(node, pod)
