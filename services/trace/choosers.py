"""The array engine's choosers: best-fit, random, FGD, gpuledger's frag-cpu and TensorFusion's three, on
:class:`services.trace.engine.ArrayCluster`, mirroring the domain strategies' rules exactly.

A chooser takes a pod, its allocation id and the feasible node indices (tie order) and returns
the node index and GPU slots. FGD keeps, per request class (share, count, CPU), each node's
score and best slot, recomputed only for nodes whose version changed since.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from services.allocator.domain.plugins.fragmentation import Workload
from services.allocator.domain.strategies_paper import MAX_SPEC_CPU, MAX_SPEC_GPU, stable_hash
from services.trace.engine import ArrayCluster, ClassArrays, Floats, Ints, fragment_rows, sigmoid_score
from services.trace.fgd_strand import FgdStrand
from services.trace.openb import TracePod

Choice = tuple[int, list[int]]
Chooser = Callable[[TracePod, str, Ints], Choice]


def best_fit(cluster: ArrayCluster) -> Chooser:
    """strategies_paper.BestFit: highest ⌊100·(1 − leftover)⌋, first node on ties."""
    def choose(pod: TracePod, allocation_id: str, fe: Ints) -> Choice:
        gpu_left = cluster.free[fe].sum(axis=1) - pod.milli * pod.count
        cpu_left = cluster.cpu[fe] - pod.cpu_milli
        score = np.floor(100 * (1 - (0.5 * cpu_left / MAX_SPEC_CPU + 0.5 * gpu_left / MAX_SPEC_GPU)))
        node = int(fe[int(np.argmax(score))])
        return node, cluster.default_slots(node, pod)
    return choose


def random_fit(cluster: ArrayCluster) -> Chooser:
    """strategies_paper.RandomFit: smallest stable hash of (allocation id, node / GPU name)."""
    def choose(pod: TracePod, allocation_id: str, fe: Ints) -> Choice:
        node = min((int(i) for i in fe), key=lambda i: stable_hash(allocation_id, cluster.names[i]))
        if pod.count != 1 or pod.milli >= 1000:
            return node, cluster.default_slots(node, pod)
        row = cluster.free[node]
        fit = [s for s in range(len(cluster.gpu_names[node])) if row[s] >= pod.milli]
        return node, [min(fit, key=lambda s: stable_hash(allocation_id, cluster.gpu_names[node][s]))]
    return choose


def _round_half_away(x: Floats) -> Floats:
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


def gpu_scores(cluster: ArrayCluster, nodes: Ints, *, used: bool, vram_weight: float = 0.7,
               tflops_weight: float = 0.3) -> Ints:
    """TensorFusion GPU scores per slot of ``nodes`` (strategies.used_score / available_score) for
    requests without VRAM: normalize(VRAM %, TFLOPS %) with VRAM fully available."""
    cap = cluster.tflops[nodes][:, None]
    avail = cluster.free[nodes] * cap // 1000 / np.maximum(cap, 1) * 100
    vram = 0.0 if used else 100.0
    tflops = 100 - avail if used else avail
    return np.clip(_round_half_away(vram * vram_weight + tflops * tflops_weight), 0, 100).astype(np.int64)


def tensorfusion(cluster: ArrayCluster, *, node_used: bool, gpu_used: bool) -> Chooser:
    """The indexed TensorFusion strategies: the feasible node with the highest ⌊mean GPU score⌋
    (first by name on ties), then the ``count`` best-scoring fitting GPUs (by name on ties)."""
    width = cluster.free.shape[1]

    def choose(pod: TracePod, allocation_id: str, fe: Ints) -> Choice:
        scores = gpu_scores(cluster, fe, used=node_used)
        real = np.arange(width)[None, :] < cluster.slots[fe][:, None]
        node_score = (scores * real).sum(axis=1) // cluster.slots[fe]
        node = int(fe[int(np.argmax(node_score))])
        row = gpu_scores(cluster, np.array([node]), used=gpu_used)[0]
        names = cluster.gpu_names[node]
        fit = [s for s in range(len(names)) if cluster.free[node, s] >= pod.milli]
        return node, sorted(fit, key=lambda s: (-int(row[s]), names[s]))[: max(1, pod.count)]
    return choose


class _Cached:
    __slots__ = ("delta", "score", "slot", "version")

    def __init__(self, size: int) -> None:
        self.version: Ints = np.full(size, -1, dtype=np.int64)
        self.score: Ints = np.zeros(size, dtype=np.int64)
        self.delta: Floats = np.zeros(size, dtype=np.float64)
        self.slot: Ints = np.zeros(size, dtype=np.int64)


class Fgd:
    """plugins.fgd.Fgd, or plugins.frag_cpu.FragCpu with ``cpu_aware=True``."""

    def __init__(self, cluster: ArrayCluster, workload: Workload, *, cpu_aware: bool = False) -> None:
        self.cluster, self.workload, self.cpu_aware = cluster, workload, cpu_aware
        self.arrays = ClassArrays(workload, cluster.model_names)
        self.classes: dict[tuple[int, int, int], _Cached] = {}

    def _frag(self, free: Ints, cpu: Ints, model: Ints) -> Floats:
        return fragment_rows(free, cpu, model, self.arrays, cpu_aware=self.cpu_aware)

    def _refresh(self, pod: TracePod, nodes: Ints, cache: _Cached) -> None:
        c = self.cluster
        free, cpu, model = c.free[nodes], c.cpu[nodes], c.model[nodes]
        before = self._frag(free, cpu, model)
        after_cpu = cpu - pod.cpu_milli
        slot = np.zeros(nodes.size, dtype=np.int64)
        if pod.count == 0:
            delta = self._frag(free, after_cpu, model) - before
        elif pod.count > 1 or pod.milli >= 1000:
            fit = free >= pod.milli
            take = fit & (np.cumsum(fit, axis=1) <= pod.count)
            delta = self._frag(free - pod.milli * take, after_cpu, model) - before
        else:
            width = free.shape[1]
            trial = np.repeat(free[:, None, :], width, axis=1)
            idx = np.arange(width)
            trial[:, idx, idx] -= pod.milli
            frag = self._frag(trial.reshape(-1, width), np.repeat(after_cpu, width),
                              np.repeat(model, width)).reshape(-1, width)
            deltas = frag - before[:, None]
            deltas[free < pod.milli] = np.inf
            slot = np.argmin(deltas, axis=1)
            delta = deltas[np.arange(nodes.size), slot]
        cache.delta[nodes] = delta
        cache.slot[nodes] = slot
        cache.score[nodes] = [sigmoid_score(float(d)) for d in delta]
        cache.version[nodes] = c.version[nodes]

    def __call__(self, pod: TracePod, allocation_id: str, fe: Ints) -> Choice:
        """The feasible node with the best rank, and its slots."""
        key = (pod.milli, pod.count, pod.cpu_milli)
        cache = self.classes.get(key) or self.classes.setdefault(key, _Cached(len(self.cluster.names)))
        stale = fe[cache.version[fe] != self.cluster.version[fe]]
        if stale.size:
            self._refresh(pod, stale, cache)
        pos = int(np.argmax(cache.score[fe]))
        node = int(fe[pos])
        if pod.count == 1 and pod.milli < 1000:
            return node, [int(cache.slot[node])]
        return node, self.cluster.default_slots(node, pod)


CHOOSERS: dict[str, Callable[[ArrayCluster, Workload], Chooser]] = {
    "best-fit": lambda cluster, workload: best_fit(cluster),
    "random": lambda cluster, workload: random_fit(cluster),
    "fgd": lambda cluster, workload: Fgd(cluster, workload),
    "frag-cpu": lambda cluster, workload: Fgd(cluster, workload, cpu_aware=True),
    "fgd-strand": FgdStrand,
    "compact-first": lambda cluster, workload: tensorfusion(cluster, node_used=True, gpu_used=True),
    "low-load-first": lambda cluster, workload: tensorfusion(cluster, node_used=False, gpu_used=False),
    "node-compact-gpu-low-load": lambda cluster, workload: tensorfusion(cluster, node_used=True, gpu_used=False),
}
"""Strategies the array engine implements, by their registry name."""


def make_chooser(name: str, cluster: ArrayCluster, workload: Workload) -> Chooser:
    """The engine's chooser for strategy ``name``; raises KeyError when it has none."""
    return CHOOSERS[name](cluster, workload)
