"""The target workload M of fragmentation-aware strategies: task classes and their weights.

Shared by the strategy interface (``strategies.ScanStrategy.with_workload``), the fragmentation
measure (``strategies/fragmentation.py``) and the learned mix (``target.py``).
"""

from __future__ import annotations

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
