"""A namespace quota's status: available percent per dimension and the alert (pure, read side).

TensorFusion internal/quota/calculator.go (``CalculateAvailablePercent``, ``IsAlertThresholdReached``,
``CalculateConditions``) and api/v1/gpuresourcequota_types.go (``GPUResourceAvailablePercent``):
five dimensions ``requests.tflops``, ``requests.vram``, ``limits.tflops``, ``limits.vram`` and
``workers``; available = max(0, (total - used) / total x 100), written as a string with two
decimals, ``"100"`` for an unbounded dimension; the alert is reached on a dimension when its
available percent is below ``100 - alertThresholdPercent`` (default 95).

Differences (docs/compatibility.md, "Quota status"): the arithmetic is exact (fractions of integer
milli-TFLOPS and bytes; the string is rounded half up, the alert compares the exact value, not the
rounded string); an explicit total of 0 admits nothing here (events.values.QuotaSpec), so it is 0 %
available rather than TensorFusion's ``"100"``; workers are floored at 0 like the other dimensions.
The projection (``ClusterState.usage``) is the only source of usage: nothing is recomputed here.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

import msgspec

from events.values import QuotaSpec
from services.allocator.domain.model import QuotaUsage

DIMENSIONS = ("requests.tflops", "requests.vram", "limits.tflops", "limits.vram", "workers")
"""TensorFusion's keys of ``status.availablePercent``, in its order."""
READY_MESSAGE = "GPUResourceQuota is ready and capacity is sufficient"
"""TensorFusion calculator.go ``QuotaReadyAndCapacitySufficient``."""
_LABELS = {"limits.tflops": "tflops limits", "requests.tflops": "tflops requests", "limits.vram": "vram limits",
           "requests.vram": "vram requests", "workers": "workers"}
"""The alert message's labels, in TensorFusion's order (each with its own flag, unlike TensorFusion)."""


class QuotaStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One namespace's status: ``available`` percent per dimension (0..100, exact), the strings
    TensorFusion writes (``available_percent``), the dimensions at the alert (``alerts``), the
    threshold, and the Ready condition's ``reason`` and ``message``."""

    available: dict[str, Fraction]
    available_percent: dict[str, str]
    alerts: tuple[str, ...]
    threshold: int
    reason: str
    message: str

    @property
    def alert(self) -> bool:
        """True when any dimension reached the alert threshold (condition Ready=False)."""
        return bool(self.alerts)


def available_fraction(total: int | None, used: int) -> Fraction:
    """Percent of ``total`` left after ``used``, in [0, 100]; 100 when ``total`` is None (unbounded)."""
    if total is None:
        return Fraction(100)
    if total <= 0:
        return Fraction(0)
    return max(Fraction(0), Fraction((total - used) * 100, total))


def format_percent(value: Fraction) -> str:
    """Two decimals rounded half up (``"40.00"``); TensorFusion ``strconv.FormatFloat(v, 'f', 2, 64)``."""
    exact = Decimal(value.numerator) / Decimal(value.denominator)
    return str(exact.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def _totals(spec: QuotaSpec) -> dict[str, int | None]:
    requests, limits = spec.total_requests, spec.total_limits
    return {
        "requests.tflops": requests.milli_tflops if requests else None,
        "requests.vram": requests.vram_bytes if requests else None,
        "limits.tflops": limits.milli_tflops if limits else None,
        "limits.vram": limits.vram_bytes if limits else None,
        "workers": spec.max_workers,
    }


def _used(usage: QuotaUsage) -> dict[str, int]:
    return {
        "requests.tflops": usage.requests_milli_tflops, "requests.vram": usage.requests_vram_bytes,
        "limits.tflops": usage.limits_milli_tflops, "limits.vram": usage.limits_vram_bytes,
        "workers": usage.workers,
    }


def quota_status(spec: QuotaSpec, usage: QuotaUsage | None) -> QuotaStatus:
    """The status of a namespace with quota ``spec`` and projected ``usage`` (None = nothing granted)."""
    totals, used = _totals(spec), _used(usage or QuotaUsage())
    available = {d: available_fraction(totals[d], used[d]) for d in DIMENSIONS}
    floor = 100 - spec.alert_threshold_percent
    alerts = tuple(d for d in DIMENSIONS if available[d] < floor)
    if alerts:
        flags = ", ".join(f"{label}: {'true' if d in alerts else 'false'}" for d, label in _LABELS.items())
        reason = "AlertThresholdReached"
        message = f"One of the following resources has reached alert threshold: {flags}"
    else:
        reason, message = "CapacitySufficient", READY_MESSAGE
    return QuotaStatus(available=available, available_percent={
                           d: "100" if totals[d] is None else format_percent(available[d]) for d in DIMENSIONS},
                       alerts=alerts, threshold=spec.alert_threshold_percent, reason=reason, message=message)
