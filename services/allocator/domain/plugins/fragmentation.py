"""GPU fragmentation of a node against a target workload (Weng et al., ATC'23, "FGD").

Pure arithmetic over a node's free state: per-GPU free milli-GPU (1000 = one whole GPU), free
CPU millicores and GPU model. The rule is the simulator's ``NodeGpuShareFragAmount``
(``pkg/utils/frag.go`` in hkust-adsl/kubernetes-scheduler-simulator; spec/fgd.md §4):
for one task class m with per-GPU share d (milli-GPU), GPU count k, CPU c and allowed models T,

- k = 0 (CPU-only), or T non-empty and the node's model not in T: every free milli is fragment;
- the node can host m (≥ k GPUs with free ≥ d, and free CPU ≥ c): only GPUs with free < d count;
- otherwise every free milli is fragment.

The node's fragmentation is Σ_m p_m · F_n(m); memory never enters.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

import msgspec

MILLI_GPU = 1000
"""Milli-GPU in one whole GPU."""


class TaskClass(msgspec.Struct, frozen=True, kw_only=True):
    """One class of the target workload: popularity ``weight`` (the p_m, Σ = 1 over a workload),
    per-GPU share ``milli`` (0-1000), ``count`` GPUs (0 = CPU-only), ``cpu_milli`` and the allowed
    GPU ``models`` (empty: any)."""

    weight: float
    milli: int
    count: int
    cpu_milli: int = 0
    models: tuple[str, ...] = ()


Workload = tuple[TaskClass, ...]
"""A target workload M: task classes whose weights sum to 1."""


def class_fragment(free: Sequence[int], *, cpu_free: int, model: str, task: TaskClass) -> int:
    """F_n(m) in milli-GPU for per-GPU free milli ``free`` (see the module docstring)."""
    total = sum(free)
    if task.count == 0 or (task.models and model not in task.models):
        return total
    fits = 0
    small = 0
    for r in free:
        if r >= task.milli:
            fits += 1
        else:
            small += r
    if fits >= task.count and cpu_free >= task.cpu_milli:
        return small
    return total


def node_fragment(free: Sequence[int], *, cpu_free: int, model: str, workload: Iterable[TaskClass]) -> float:
    """F_n(M) = Σ_m p_m · F_n(m), in milli-GPU."""
    return sum(t.weight * class_fragment(free, cpu_free=cpu_free, model=model, task=t) for t in workload)


class FragmentCache:
    """Memoised :func:`node_fragment` for one workload, keyed by (model, CPU bucket, sorted free milli).

    F_n(M) does not depend on the order of the GPUs, and free CPU only matters through which
    classes' CPU needs it covers (the bucket), so nodes in equivalent states share an entry.
    Cleared when it reaches ``limit`` entries.
    """

    __slots__ = ("_cache", "_cpus", "limit", "workload")

    def __init__(self, workload: Workload, *, limit: int = 500_000) -> None:
        self.workload = workload
        self.limit = limit
        self._cpus = sorted({t.cpu_milli for t in workload})
        self._cache: dict[tuple[str, int, tuple[int, ...]], float] = {}

    def get(self, free: Sequence[int], *, cpu_free: int, model: str) -> float:
        """F_n(M) of the node state, computed at most once per distinct state."""
        bucket = bisect.bisect_right(self._cpus, cpu_free)
        key = (model, bucket, tuple(sorted(free)))
        value = self._cache.get(key)
        if value is None:
            if len(self._cache) >= self.limit:
                self._cache.clear()
            value = node_fragment(key[2], cpu_free=cpu_free, model=model, workload=self.workload)
            self._cache[key] = value
        return value
