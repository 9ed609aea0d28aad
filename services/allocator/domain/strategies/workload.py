"""The target workload M of FGD: the trace's "typical pods" (simulator ``utils.GetTypicalPods``).

Pods are grouped by (CPU millicores, per-GPU milli-GPU, GPU count, allowed models); memory is
not part of the key. Groups are taken most popular first until they cover ≥ 95 % of the pods,
and their frequencies are renormalised to sum to 1 (simulator ``utils.GetTypicalPods``). CPU-only pods are
included as classes with count 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from services.allocator.domain.strategies.fragmentation import TaskClass, Workload

PodKey = tuple[int, int, int, tuple[str, ...]]
"""(cpu_milli, per-GPU milli-GPU 0-1000, GPU count, allowed models) of one pod."""

POPULARITY_PERCENT = 95
"""Cumulative share of pods the selected classes must cover (``podPopularityThreshold``)."""


def typical_workload(pods: Iterable[PodKey], *, threshold_percent: int = POPULARITY_PERCENT) -> Workload:
    """The most popular pod classes covering ``threshold_percent`` % of ``pods``, weights Σ = 1.

    Ties in popularity keep first-appearance order. Raises ValueError for an empty pod list.
    """
    return typical_workload_of(Counter(pods), threshold_percent=threshold_percent)


def typical_workload_of(counts: Mapping[PodKey, int], *, threshold_percent: int = POPULARITY_PERCENT) -> Workload:
    """:func:`typical_workload` of pods given as counts per class, the classes in order of first
    appearance (a ``Counter`` of the pods gives exactly that). Raises ValueError when there are none."""
    total = sum(counts.values())
    if total == 0:
        raise ValueError("typical_workload: no pods")
    chosen: list[tuple[PodKey, int]] = []
    covered = 0
    for key, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        chosen.append((key, n))
        covered += n
        if covered * 100 >= threshold_percent * total:
            break
    return tuple(
        TaskClass(weight=n / covered, milli=key[1], count=key[2], cpu_milli=key[0], models=key[3])
        for key, n in chosen
    )


_OPENB_DEFAULT: tuple[tuple[int, int, int, int, tuple[str, ...]], ...] = (
    (1047, 810, 1, 3152, ()),
    (874, 1000, 1, 11300, ()),
    (599, 1000, 1, 11400, ()),
    (470, 1000, 1, 3152, ()),
    (388, 470, 1, 11908, ()),
    (366, 0, 0, 12500, ()),
    (360, 470, 1, 8000, ()),
    (326, 1000, 1, 12000, ()),
    (290, 0, 0, 32000, ()),
    (255, 1000, 1, 18708, ()),
    (237, 650, 1, 11908, ()),
    (232, 320, 1, 4000, ()),
    (195, 1000, 1, 9810, ()),
    (185, 0, 0, 8000, ()),
    (164, 1000, 1, 8000, ()),
    (159, 1000, 1, 4000, ()),
    (158, 1000, 1, 15700, ()),
    (153, 1000, 1, 11908, ()),
    (150, 1000, 1, 16000, ()),
    (122, 230, 1, 4000, ()),
    (120, 460, 1, 6000, ()),
    (120, 0, 0, 15400, ()),
    (95, 0, 0, 16500, ()),
    (93, 1000, 1, 14200, ()),
    (84, 1000, 1, 24200, ()),
    (75, 590, 1, 3152, ()),
    (72, 320, 1, 8000, ()),
    (72, 550, 1, 4152, ()),
    (55, 1000, 1, 11900, ()),
    (54, 160, 1, 4000, ()),
    (45, 370, 1, 4152, ()),
    (43, 220, 1, 4000, ()),
    (41, 1000, 1, 8200, ()),
    (36, 1000, 1, 15200, ()),
    (31, 810, 1, 4152, ()),
)
"""(pods, milli, count, cpu_milli, models) of openb_pod_list_default.csv's 35 typical classes."""

DEFAULT_WORKLOAD: Workload = typical_workload(
    (key for n, milli, count, cpu, models in _OPENB_DEFAULT for key in [(cpu, milli, count, models)] * n),
    threshold_percent=100,
)
"""M used when FGD is selected in the service: the Alibaba openb default trace's typical pods."""
