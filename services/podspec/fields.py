"""Readers for single annotation values: quantities, integers, booleans, index lists, durations.

Each reader returns ``None`` when the key is absent and raises :class:`PodSpecError` naming the
key and the raw value when it is present but bad. Where TensorFusion silently ignores a bad value
(quantities, booleans other than "true"/"false") we deny instead; docs/compatibility.md lists it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import ROUND_CEILING, Decimal

from events import quantity
from services.podspec.errors import PodSpecError

_INT32 = (-(2**31), 2**31 - 1)
_DURATION = re.compile(r"^(?:(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_SECONDS = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "µs": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}


def read_quantity(annotations: Mapping[str, str], *, key: str, scale: int) -> int | None:
    """A non-negative Kubernetes quantity as an integer of ``1/scale`` units, rounded up.

    ``scale=1000`` gives milli-units (TFLOPS, percent), ``scale=1`` bytes; rounded up like
    Kubernetes ``MilliValue()``/``Value()``. "" counts as absent
    (TensorFusion). Raises PodSpecError for a malformed or negative quantity.
    """
    raw = annotations.get(key)
    if raw is None or raw == "":
        return None
    try:
        value = quantity.parse(raw)
    except quantity.QuantityError:
        raise PodSpecError(
            f'{key}={raw!r}: not a Kubernetes quantity (e.g. "10", "500m", "4Gi")', field=key, value=raw
        ) from None
    if value < 0:
        raise PodSpecError(f"{key}={raw!r}: must not be negative", field=key, value=raw)
    return int((value * scale).to_integral_value(rounding=ROUND_CEILING))


def go_parse_int(raw: str) -> int:
    """Go ``strconv.ParseInt(raw, 10, 32)``; raises ValueError with Go's message text."""
    if not re.fullmatch(r"[+-]?\d+", raw):
        raise ValueError(f'strconv.ParseInt: parsing "{raw}": invalid syntax')
    value = int(raw)
    if not _INT32[0] <= value <= _INT32[1]:
        raise ValueError(f'strconv.ParseInt: parsing "{raw}": value out of range')
    return value


def read_bool(annotations: Mapping[str, str], *, key: str) -> bool | None:
    """``"true"`` -> True, ``"false"`` -> False, absent -> None; any other value is denied.

    Deviation: TensorFusion treats "True", "1", "yes" as absent; we name the key instead.
    """
    raw = annotations.get(key)
    if raw is None:
        return None
    if raw in ("true", "false"):
        return raw == "true"
    raise PodSpecError(f'{key}={raw!r}: must be "true" or "false"', field=key, value=raw)


def read_indices(annotations: Mapping[str, str], *, key: str, pod_name: str) -> tuple[int, ...] | None:
    """A comma list of distinct non-negative GPU indices (each token trimmed); "" -> None.

    Error text follows TensorFusion (``... annotation is not valid for Pod <name>``) plus the value;
    duplicates are denied (TensorFusion counts them twice).
    """
    raw = annotations.get(key)
    if raw is None or raw == "":
        return None
    tokens = [token.strip() for token in raw.split(",")]
    if not all(token.isdigit() for token in tokens):
        raise PodSpecError(f"{key} annotation is not valid for Pod {pod_name}: {raw!r}", field=key, value=raw)
    indices = tuple(int(token) for token in tokens)
    if len(set(indices)) != len(indices):
        raise PodSpecError(f"{key}={raw!r}: GPU indices must be distinct", field=key, value=raw)
    return indices


def parse_duration_s(raw: str) -> Decimal:
    """Go ``time.ParseDuration`` for non-negative durations, in seconds; ValueError with Go's text."""
    if raw in ("0", ""):
        return Decimal(0)
    body = raw.lstrip("+")
    if not _DURATION.fullmatch(body):
        if re.fullmatch(r"[\d.]+", body):
            raise ValueError(f'time: missing unit in duration "{raw}"')
        raise ValueError(f'time: invalid duration "{raw}"')
    return sum((Decimal(n) * _SECONDS[u] for n, u in _DURATION_PART.findall(body)), Decimal(0))
