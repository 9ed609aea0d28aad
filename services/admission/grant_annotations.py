"""The annotations a bind writes besides ``gpu-ids``: the hard SM percent and the per-container GPUs.

Pure functions of the granted allocation (spec, GPUs) and the GPUs' capacities, following
TensorFusion internal/scheduler/gpuresources/gpuresources.go (PreBind, ``effectiveHardSMPercent``
and ``allocateGPUsToContainers``). An input that cannot be mapped leaves its annotation out (as
TensorFusion, which logs the error and binds anyway); the reason is returned for the log.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from events.values import AllocationSpec
from services.podspec import keys


def hard_sm_percent(spec: AllocationSpec, capacity_milli_tflops: int) -> int | None:
    """Whole percent of the GPU's SMs a hard-isolated worker may use, or None when not applicable.

    Applies to ``isolation: hard`` with a TFLOPS limit and no compute-percent limit (a percent limit
    is passed to the runtime as is). ``capacity_milli_tflops`` is the first granted GPU's capacity
    (TensorFusion reads ``gpus[0]``). Result: ``ceil(limit / capacity * 100)`` clamped to 1..100,
    in exact integers (TensorFusion: float64 ``math.Ceil``). None when the capacity is unknown (0).
    """
    limit = spec.limit
    if spec.isolation != "hard" or limit.milli_tflops <= 0 or limit.compute_milli_percent or capacity_milli_tflops <= 0:
        return None
    return max(1, min(100, -(-limit.milli_tflops * 100 // capacity_milli_tflops)))


def container_gpus(spec: AllocationSpec, gpus: tuple[str, ...]) -> tuple[str | None, str]:
    """``(JSON, "")`` mapping each container of ``container-gpu-count`` to its GPUs, or ``(None, why)``.

    Containers in name order take consecutive runs of the granted GPUs (TensorFusion
    allocateGPUsToContainers); counts must be whole numbers >= 0 whose sum fits the GPUs. Without
    the attribute every container shares all GPUs and nothing is written: ``(None, "")``.
    """
    raw = spec.attributes.get(keys.CONTAINER_GPU_COUNT, "")
    if not raw:
        return None, ""
    try:
        counts = json.loads(raw)
    except ValueError:
        return None, f"{keys.CONTAINER_GPU_COUNT} is not JSON"
    if not isinstance(counts, Mapping) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts.values()):
        return None, f"{keys.CONTAINER_GPU_COUNT} must map container names to whole numbers >= 0"
    mapping: dict[str, list[str]] = {}
    start = 0
    for name in sorted(counts):
        if start + counts[name] > len(gpus):
            return None, f"not enough GPUs: need {counts[name]} more for container {name}"
        mapping[name] = list(gpus[start:start + counts[name]])
        start += counts[name]
    return json.dumps(mapping, sort_keys=True, separators=(",", ":")), ""


def bind_annotations(spec: AllocationSpec, gpus: tuple[str, ...],
                     capacity: Mapping[str, int]) -> tuple[dict[str, str], list[str]]:
    """The extra annotations of a bind and the problems that left one out (for the log).

    ``capacity`` maps GPU names to milli-TFLOPS (from NodeRegistered events).
    """
    out: dict[str, str] = {}
    problems: list[str] = []
    percent = hard_sm_percent(spec, capacity.get(gpus[0], 0) if gpus else 0)
    if percent is not None:
        out[keys.EFFECTIVE_HARD_SM_PERCENT] = str(percent)
    elif spec.isolation == "hard" and spec.limit.milli_tflops > 0 and not spec.limit.compute_milli_percent:
        problems.append(f"{keys.EFFECTIVE_HARD_SM_PERCENT}: capacity of GPU {gpus[0] if gpus else '?'} unknown")
    mapping, why = container_gpus(spec, gpus)
    if mapping is not None:
        out[keys.CONTAINER_GPUS] = mapping
    elif why:
        problems.append(why)
    return out, problems
