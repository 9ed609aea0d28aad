"""GPU fragmentation of a node against a target workload (Weng et al., ATC'23, "FGD").

Pure arithmetic over a node's free state: per-GPU free milli-GPU (1000 = one whole GPU), free
CPU millicores and GPU model. The rule is the simulator's ``NodeGpuShareFragAmount``
(``pkg/utils/frag.go`` in hkust-adsl/kubernetes-scheduler-simulator):
for one task class m with per-GPU share d (milli-GPU), GPU count k, CPU c and allowed models T,

- k = 0 (CPU-only), or T non-empty and the node's model not in T: every free milli is fragment;
- the node can host m (≥ k GPUs with free ≥ d, and free CPU ≥ c): only GPUs with free < d count;
- otherwise every free milli is fragment.

The node's fragmentation is Σ_m p_m · F_n(m); memory never enters.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from services.allocator.domain.taskclass import MILLI_GPU, TaskClass, Workload

__all__ = ["MILLI_GPU", "FragmentCache", "TaskClass", "Workload", "class_fragment", "class_fragment_cpu",
           "node_fragment"]


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


def class_fragment_cpu(free: Sequence[int], *, cpu_free: int, model: str, task: TaskClass) -> float:
    """F_n(m) that also counts GPU stranded by CPU (gpuledger's frag-cpu; docs/placement.md).

    As :func:`class_fragment`, except for a whole-GPU class m (d = 1000) the node can host: of
    its fully free GPUs (``big`` milli), only the share that CPU lets m use is not fragment. With
    ``per_gpu = #free GPUs // k`` pods of m fitting the GPUs and ``⌊cpu_free / c⌋`` fitting the CPU,
    F = small + big · (1 − min(per_gpu, by_cpu) / per_gpu); equal to FGD's when CPU does not bind.
    Sharing classes keep FGD's measure (counting them too made gpushare40 worse: docs/placement.md).
    """
    total = sum(free)
    if task.count == 0 or (task.models and model not in task.models):
        return total
    fits = small = big = 0
    milli = task.milli
    for r in free:
        if r >= milli:
            fits += 1
            big += r
        else:
            small += r
    if fits < task.count or cpu_free < task.cpu_milli:
        return total
    if milli < MILLI_GPU:
        return small
    per_gpu = sum(r // milli for r in free) // max(task.count, 1)
    by_cpu = cpu_free // task.cpu_milli if task.cpu_milli > 0 else per_gpu
    share = min(per_gpu, by_cpu) / per_gpu if per_gpu > 0 else 0.0
    return small + big * (1 - share)


def node_fragment(free: Sequence[int], *, cpu_free: int, model: str, workload: Iterable[TaskClass],
                  cpu_aware: bool = False) -> float:
    """F_n(M) = Σ_m p_m · F_n(m), in milli-GPU (``cpu_aware``: with :func:`class_fragment_cpu`)."""
    measure = class_fragment_cpu if cpu_aware else class_fragment
    return sum(t.weight * measure(free, cpu_free=cpu_free, model=model, task=t) for t in workload)


Row = tuple[float, int, int, int, tuple[str, ...], bool]
"""A task class for the hot loop: (weight, index of its share in the table's shares or -1 for a
CPU-only class, GPU count, cpu_milli, models, whole-GPU class)."""
Table = tuple[tuple[int, ...], tuple[Row, ...]]
"""The distinct per-GPU shares of a workload's GPU classes, and its classes as rows, in order."""


def _rows(workload: Sequence[TaskClass]) -> Table:
    shares = tuple(sorted({t.milli for t in workload if t.count}))
    rows = tuple((t.weight, shares.index(t.milli) if t.count else -1, t.count, t.cpu_milli, t.models,
                  t.milli >= MILLI_GPU) for t in workload)
    return shares, rows


def _fragment(ordered: Sequence[int], cpu_free: int, model: str, table: Table, cpu_aware: bool) -> float:
    """:func:`node_fragment` for free milli ``ordered`` ascending, bit for bit (same terms, summed in
    the same order): per distinct share d, the GPUs that fit it and the free milli below it are a
    bisection and a prefix sum of the sorted free milli (no walk over the GPUs per class)."""
    prefix = [0]
    acc = 0
    for r in ordered:
        acc += r
        prefix.append(acc)
    total = acc
    n = len(ordered)
    fits: list[int] = []
    smalls: list[int] = []
    for milli in table[0]:
        i = bisect.bisect_left(ordered, milli)
        fits.append(n - i)
        smalls.append(prefix[i])
    terms: list[float] = []
    for weight, j, count, cpu, models, whole in table[1]:
        if j < 0 or (models and model not in models) or fits[j] < count or cpu_free < cpu:
            terms.append(weight * total)
        elif not cpu_aware or not whole:
            terms.append(weight * smalls[j])
        else:
            small = smalls[j]
            per_gpu = fits[j] // count  # a whole-GPU class: r // milli is 1 exactly for free GPUs
            by_cpu = cpu_free // cpu if cpu > 0 else per_gpu
            share = min(per_gpu, by_cpu) / per_gpu if per_gpu > 0 else 0.0
            terms.append(weight * (small + (total - small) * (1 - share)))
    return sum(terms)


class FragmentCache:
    """Memoised :func:`node_fragment` for one workload, keyed by (model, CPU bucket, sorted free milli).

    F_n(M) does not depend on the order of the GPUs, and for FGD free CPU only matters through
    which classes' CPU needs it covers (the bucket), so nodes in equivalent states share an entry.
    The ``cpu_aware`` measure also reads how many pods of a whole-GPU class the CPU holds, which
    never matters beyond the node's number n of wholly free GPUs: its bucket is the position of the
    free CPU among every class's CPU need and every ``k · c`` (k ≤ n) for the CPU needs ``c`` of
    the whole-GPU classes, i.e. exactly which ``min(cpu // c, n)`` it has. Cleared when it reaches ``limit``
    entries.
    """

    __slots__ = ("_cache", "_cpus", "_rows", "_thresholds", "_whole_cpus", "cpu_aware", "limit", "workload")

    def __init__(self, workload: Workload, *, limit: int = 500_000, cpu_aware: bool = False) -> None:
        self.workload = workload
        self.limit = limit
        self.cpu_aware = cpu_aware
        self._cpus = sorted({t.cpu_milli for t in workload})
        self._whole_cpus = sorted({t.cpu_milli for t in workload if t.count and t.milli >= MILLI_GPU and t.cpu_milli})
        self._thresholds: dict[int, list[int]] = {}
        self._rows = _rows(workload)
        self._cache: dict[tuple[str, int, tuple[int, ...]], float] = {}

    def get(self, free: Sequence[int], *, cpu_free: int, model: str) -> float:
        """F_n(M) of the node state, computed at most once per distinct state."""
        ordered = tuple(sorted(free))
        cuts = self._cpus
        if self.cpu_aware:
            n = len(ordered) - bisect.bisect_left(ordered, MILLI_GPU)
            cuts = self._thresholds.get(n) or self._thresholds.setdefault(
                n, sorted(set(self._cpus) | {k * c for c in self._whole_cpus for k in range(1, n + 1)}))
        key = (model, bisect.bisect_right(cuts, cpu_free), ordered)
        value = self._cache.get(key)
        if value is None:
            if len(self._cache) >= self.limit:
                self._cache.clear()
            value = _fragment(ordered, cpu_free, model, self._rows, self.cpu_aware)
            self._cache[key] = value
        return value
