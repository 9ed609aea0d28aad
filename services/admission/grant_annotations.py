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
from services.podspec.device_plan import container_gpu_map


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

    The mapping is :func:`services.podspec.device_plan.container_gpu_map` (TensorFusion
    allocateGPUsToContainers). Without the attribute every container shares all GPUs and nothing
    is written: ``(None, "")``.
    """
    mapping, why = container_gpu_map(spec, gpus)
    if mapping is None:
        return None, why
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
