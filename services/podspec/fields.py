"""Readers for single annotation values: quantities, integers, booleans, index lists, durations.

Each reader returns ``None`` when the key is absent and raises :class:`PodSpecError` naming the
key and the raw value when it is present but bad. Where TensorFusion silently ignores a bad value
(quantities, booleans other than "true"/"false") we deny instead; docs/compatibility.md lists it.
Messages are our own, naming the annotation and the value (never Go's ``strconv`` text).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal

from events import bounds, quantity
from events.durations import go_duration_s
from services.podspec.errors import PodSpecError

_INT32 = (-(2**31), 2**31 - 1)
_INT = re.compile(r"[+-]?[0-9]+")
_INDEX = re.compile(r"[0-9]{1,4}")


def read_quantity(annotations: Mapping[str, str], *, key: str, scale: int, most: int | None = None) -> int | None:
    """A non-negative Kubernetes quantity as an integer of ``1/scale`` units, rounded up.

    ``scale=1000`` gives milli-units (TFLOPS, percent), ``scale=1`` bytes; rounded up like
    Kubernetes ``MilliValue()``/``Value()``. "" counts as absent (TensorFusion). Raises
    PodSpecError for a malformed or negative quantity, or one above ``most`` (the physical bound
    of :mod:`events.bounds`, in the same units; e.g. ``vram-request: 8Ei`` above 4 TiB per GPU).
    """
    raw = annotations.get(key)
    if raw is None or raw == "":
        return None
    try:
        value = quantity.parse(raw)
    except quantity.QuantityError as exc:
        raise PodSpecError(
            f'{key}={raw[:80]!r}: not a Kubernetes quantity (e.g. "10", "500m", "4Gi"): {exc}', field=key, value=raw
        ) from None
    if value < 0:
        raise PodSpecError(f"{key}={raw!r}: must not be negative", field=key, value=raw)
    scaled = quantity.to_milli(raw) if scale == 1000 else quantity.to_value(raw)
    if most is not None and scaled > most:
        shown = quantity.format_milli(most) if scale == 1000 else quantity.format_bytes(most)
        raise PodSpecError(
            f"{key}={raw!r}: above gpuledger's per-GPU bound of {shown}", field=key, value=raw
        )
    return scaled


def parse_int32(raw: str) -> int:
    """A whole number within the 32-bit range (what TensorFusion's ``strconv.ParseInt(raw, 10, 32)``
    accepts); raises ValueError with our own text ("not a whole number", "outside ...")."""
    if not _INT.fullmatch(raw):
        raise ValueError("not a whole number")
    if len(raw.lstrip("+-").lstrip("0")) > 10:
        raise ValueError(f"outside the 32-bit range [{_INT32[0]}, {_INT32[1]}]")
    value = int(raw)
    if not _INT32[0] <= value <= _INT32[1]:
        raise ValueError(f"outside the 32-bit range [{_INT32[0]}, {_INT32[1]}]")
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
    """A comma list of distinct GPU indices 0-1023 (each token trimmed); "" -> None.

    Error text follows TensorFusion (``... annotation is not valid for Pod <name>``) plus the value;
    duplicates are denied (TensorFusion counts them twice), and so are indices beyond
    ``events.bounds.MAX_GPUS_PER_NODE`` and lists longer than that many entries.
    """
    raw = annotations.get(key)
    if raw is None or raw == "":
        return None
    shown = raw if len(raw) <= 80 else raw[:80] + bounds.TRUNCATION_MARKER
    tokens = [token.strip() for token in raw.split(",")]
    if len(tokens) > bounds.MAX_GPUS_PER_NODE:
        raise PodSpecError(f"{key}: {len(tokens)} GPU indices, at most {bounds.MAX_GPUS_PER_NODE}", field=key,
                           value=shown)
    if not all(_INDEX.fullmatch(token) for token in tokens):
        raise PodSpecError(f"{key} annotation is not valid for Pod {pod_name}: {shown!r}", field=key, value=shown)
    indices = tuple(int(token) for token in tokens)
    if max(indices) >= bounds.MAX_GPUS_PER_NODE:
        raise PodSpecError(f"{key}={shown!r}: GPU index {max(indices)} outside [0, {bounds.MAX_GPUS_PER_NODE - 1}]",
                           field=key, value=shown)
    if len(set(indices)) != len(indices):
        raise PodSpecError(f"{key}={shown!r}: GPU indices must be distinct", field=key, value=shown)
    return indices


def parse_duration_s(raw: str) -> Decimal:
    """A non-negative Go-style duration (``"30s"``, ``"1h30m"``, ``"0"``) in seconds, as Go
    ``time.ParseDuration`` accepts it; raises ValueError with our own text."""
    if raw in ("0", ""):
        return Decimal(0)
    body = raw.lstrip("+")
    seconds = go_duration_s(body) if len(body) <= 64 else None
    if seconds is None:
        if re.fullmatch(r"[\d.]+", body):
            raise ValueError('a duration needs a unit (e.g. "30s", "5m", "1h")')
        raise ValueError('not a duration (e.g. "30s", "5m", "1h30m")')
    return seconds
