"""Preemption inputs of a pod: its priority (PriorityClass value) and its eviction protection.

Priority: only a pod that names a ``spec.priorityClassName`` carries one. Kubernetes' Priority
admission plugin runs before mutating webhooks and writes the class's value into ``spec.priority``;
without the plugin (or in ``gpuledger simulate``) the value comes from the PriorityClass objects the
caller passes (:attr:`ComposeContext.priority_classes`). A pod without a class name has no priority
of its own, even when ``spec.priority`` is set (the plugin writes 0, or the global default, there):
the allocator then derives it from the QoS (``events.values.priority_of``: critical 100000, high
10000, medium and low 0, TensorFusion's ``tensor-fusion-<qos>`` classes, which TensorFusion's webhook
assigns only to pods without a class name).

Eviction protection: ``tensor-fusion.ai/eviction-protection: <Go duration>`` spares the pod from
preemption until its creation plus the duration (TensorFusion's scheduler patch
``patches/scheduler-pdb-1.patch``); validated here and recorded under the same key in the request's
attributes, as the annotation's original string. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from services.podspec import keys
from services.podspec.errors import PodSpecError
from services.podspec.fields import parse_duration_s

MAX_GO_DURATION_S = Decimal(2**63 - 1) / Decimal(10**9)
"""Longest duration Go's ``time.ParseDuration`` accepts (int64 nanoseconds, about 292 years)."""

_INT32 = (-(2**31), 2**31 - 1)


def read_priority(pod: Mapping[str, Any], *, classes: Mapping[str, int]) -> int | None:
    """The pod's PriorityClass value, or None when it names no class (QoS decides) or the class is unknown.

    ``classes``: PriorityClass name -> ``value`` (the webhook's cache). ``spec.priority`` wins over
    ``classes`` (the API server resolved it). Raises PodSpecError when ``spec.priority`` is not a
    32-bit integer or ``spec.priorityClassName`` is not a string.
    """
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return None
    name = spec.get("priorityClassName")
    if name is None or name == "":
        return None
    if not isinstance(name, str):
        raise PodSpecError(
            f"spec.priorityClassName={name!r}: must be a string", field="spec.priorityClassName", value=repr(name)
        )
    value = spec.get("priority")
    if value is None:
        return classes.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not _INT32[0] <= value <= _INT32[1]:
        raise PodSpecError(
            f"spec.priority={value!r}: must be a 32-bit integer (the value of PriorityClass {name})",
            field="spec.priority",
            value=repr(value),
        )
    return value


def eviction_protection_attributes(annotations: Mapping[str, str]) -> dict[str, str]:
    """``{"tensor-fusion.ai/eviction-protection": <annotation>}`` for a valid non-zero Go duration; ``{}`` when absent,
    empty or zero. Raises PodSpecError naming the annotation and value for anything else (a negative,
    unit-less or malformed duration, or one longer than Go accepts)."""
    raw = annotations.get(keys.EVICTION_PROTECTION)
    if raw is None or raw == "":
        return {}
    if raw.startswith("-"):
        raise PodSpecError(
            f"{keys.EVICTION_PROTECTION}={raw!r}: must not be negative", field=keys.EVICTION_PROTECTION, value=raw
        )
    try:
        seconds = parse_duration_s(raw)
    except ValueError as exc:
        raise PodSpecError(
            f"{keys.EVICTION_PROTECTION}={raw!r}: {exc}", field=keys.EVICTION_PROTECTION, value=raw
        ) from None
    if seconds > MAX_GO_DURATION_S:
        raise PodSpecError(
            f"{keys.EVICTION_PROTECTION}={raw!r}: longer than a Go duration can be (about 292 years)",
            field=keys.EVICTION_PROTECTION,
            value=raw,
        )
    return {keys.EVICTION_PROTECTION: raw} if seconds else {}
