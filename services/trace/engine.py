"""Array engine: the trace experiment's placement loop on numpy arrays, decision-for-decision
equal to the domain's ``process`` for the paper's strategies (tests/unit/trace/test_engine.py).

The domain walks every feasible node in Python per request, which makes the full table
(5 traces × 7 strategies × 10 seeds of ~10k pods on 1,213 nodes) hours of CPU. This engine keeps
per-node free milli-GPU per GPU slot, free CPU and memory and the model as arrays, filters with
vectorised comparisons and computes the same scores as the domain strategies
(services/allocator/domain/strategies_paper.py, plugins/fgd.py, plugins/frag_cpu.py, strategies.py),
caching FGD's per-node Δ per request class until the node changes. Milli-GPU arithmetic is
exact for the trace (every share × capacity is a whole milli-TFLOPS), which the equivalence
test checks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from events.intents import RegisterNode
from services.allocator.domain.plugins.fragmentation import Workload
from services.allocator.domain.strategies_paper import UNKNOWN_CPU
from services.trace.openb import TracePod

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
UNKNOWN_MEMORY = 1 << 62


class ArrayCluster:
    """Nodes in tie-break order (name order) with per-slot free milli-GPU (padding slots hold 0)."""

    def __init__(self, nodes: Sequence[RegisterNode]) -> None:
        ordered = sorted(nodes, key=lambda n: n.node)
        self.names = [n.node for n in ordered]
        self.gpu_names = [[g.name for g in sorted(n.gpus, key=lambda g: (g.index or 0, g.name))] for n in ordered]
        width = max((len(n.gpus) for n in ordered), default=1)
        self.free: Ints = np.zeros((len(ordered), width), dtype=np.int64)
        for i, n in enumerate(ordered):
            self.free[i, : len(n.gpus)] = 1000
        self.cpu: Ints = np.array([n.cpu_milli or UNKNOWN_CPU for n in ordered], dtype=np.int64)
        self.memory: Ints = np.array([n.memory_bytes or UNKNOWN_MEMORY for n in ordered], dtype=np.int64)
        models = sorted({g.model for n in ordered for g in n.gpus})
        self.model_names = models
        first = [n.gpus[0].model if n.gpus else "" for n in ordered]
        self.model: Ints = np.array([models.index(m) if m in models else -1 for m in first], dtype=np.int64)
        self.tflops: Ints = np.array([n.gpus[0].capacity.milli_tflops if n.gpus else 0 for n in ordered],
                                     dtype=np.int64)
        self.slots: Ints = np.array([len(n.gpus) for n in ordered], dtype=np.int64)
        self.version: Ints = np.zeros(len(ordered), dtype=np.int64)
        self.capacity_milli = 1000 * sum(len(n.gpus) for n in ordered)

    def model_mask(self, models: Sequence[str]) -> npt.NDArray[np.bool_]:
        """Per node: its model is in ``models`` (all True when ``models`` is empty)."""
        if not models:
            return np.ones(len(self.names), dtype=bool)
        ids = [self.model_names.index(m) for m in models if m in self.model_names]
        return np.isin(self.model, ids)

    def feasible(self, pod: TracePod) -> Ints:
        """Indices (ascending: tie order) of nodes that can take ``pod`` now."""
        ok = (self.cpu >= pod.cpu_milli) if pod.cpu_milli else np.ones(len(self.names), dtype=bool)
        if pod.memory_bytes:
            ok &= self.memory >= pod.memory_bytes
        if pod.count:
            ok &= (self.free >= pod.milli).sum(axis=1) >= pod.count
        if pod.models:
            ok &= self.model_mask(pod.models)
        return np.flatnonzero(ok)

    def place(self, node: int, slots: Sequence[int], pod: TracePod) -> None:
        """Take ``pod``'s share from ``slots`` of ``node`` and its CPU/memory."""
        for s in slots:
            self.free[node, s] -= pod.milli
        self.cpu[node] -= pod.cpu_milli
        self.memory[node] -= pod.memory_bytes
        self.version[node] += 1

    def default_slots(self, node: int, pod: TracePod) -> list[int]:
        """Whole GPUs / CPU-only: lowest-index fitting slots; a share: the tightest fit, lowest index."""
        if pod.count == 0:
            return [0]
        row = self.free[node]
        fit = [s for s in range(row.size) if row[s] >= pod.milli and s < len(self.gpu_names[node])]
        if pod.count > 1 or pod.milli >= 1000:
            return fit[: pod.count]
        return [min(fit, key=lambda s: (int(row[s]), s))]


class ClassArrays:
    """A workload's task classes as arrays: share, count, CPU and per-model admission [model, class]."""

    def __init__(self, workload: Workload, model_names: Sequence[str]) -> None:
        self.weights = [t.weight for t in workload]
        self.milli: Ints = np.array([t.milli for t in workload], dtype=np.int64)
        self.count: Ints = np.array([t.count for t in workload], dtype=np.int64)
        self.cpu: Ints = np.array([t.cpu_milli for t in workload], dtype=np.int64)
        rows = [[not t.models or m in t.models for t in workload] for m in model_names]
        rows.append([not t.models for t in workload])  # unknown model (index -1)
        self.admits = np.array(rows, dtype=bool)
        self.gpu_class = self.count > 0
        self.whole = self.milli >= 1000


def fragment_rows(free: Ints, cpu: Ints, model: Ints, classes: ClassArrays, *, cpu_aware: bool = False) -> Floats:
    """F_n(M) per row (plugins/fragmentation.py), summed over classes in order like the domain."""
    total = free.sum(axis=1)
    fits_gpu = free[:, None, :] >= classes.milli[None, :, None]
    fits = (fits_gpu.sum(axis=2) >= classes.count[None, :]) & (cpu[:, None] >= classes.cpu[None, :])
    fits &= classes.admits[model] & classes.gpu_class[None, :]
    small = (free[:, None, :] * ~fits_gpu).sum(axis=2)
    if cpu_aware:
        per_gpu = (free[:, None, :] // np.maximum(classes.milli, 1)[None, :, None]).sum(axis=2)
        per_gpu = per_gpu // np.maximum(classes.count, 1)[None, :]
        by_cpu = np.where(classes.cpu[None, :] > 0, cpu[:, None] // np.maximum(classes.cpu, 1)[None, :], per_gpu)
        fitted = np.minimum(per_gpu, by_cpu)
        big = (free[:, None, :] * fits_gpu).sum(axis=2)
        share = np.where(per_gpu > 0, fitted / np.maximum(per_gpu, 1), 0.0)
        aware = np.where(classes.whole[None, :], small + big * (1 - share), small)
        value = np.where(fits, aware, total[:, None])
    else:
        value = np.where(fits, small, total[:, None])
    acc: Floats = classes.weights[0] * value[:, 0]
    for j in range(1, len(classes.weights)):
        acc = acc + classes.weights[j] * value[:, j]
    return acc


def sigmoid_score(delta: float) -> int:
    """Same as plugins.fgd.sigmoid_score (Python floats, so identical bits)."""
    x = delta / 1000
    return 0 if x > 700 else math.floor(100 / (1 + math.exp(x)))


Choice = tuple[int, list[int]]


def run_pods(cluster: ArrayCluster, pods: Sequence[TracePod], choose: Callable[[TracePod, str, Ints], Choice]
             ) -> tuple[list[int], list[int], list[Choice | None]]:
    """Place ``pods`` in order (one attempt each); (arrived, used) milli-GPU after each and the choices."""
    arrived_total = used_total = 0
    arrived: list[int] = []
    used: list[int] = []
    choices: list[Choice | None] = []
    for i, pod in enumerate(pods):
        fe = cluster.feasible(pod)
        choice = None
        if fe.size:
            choice = choose(pod, f"{i}-{pod.name}", fe)
            cluster.place(choice[0], choice[1], pod)
            used_total += pod.demand
        arrived_total += pod.demand
        arrived.append(arrived_total)
        used.append(used_total)
        choices.append(choice)
    return arrived, used, choices
