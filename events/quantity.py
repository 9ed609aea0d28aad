"""Kubernetes resource quantities: exact parsing and canonical formatting.

Parses strings such as ``"4Gi"``, ``"500m"``, ``"1.5"``, ``"1e3"`` exactly (Decimal) and
formats integers back the way Kubernetes canonicalises them (``1024Mi`` -> ``"1Gi"``,
``0.5`` -> ``"500m"``, ``1000`` -> ``"1k"``). Rounding follows Kubernetes: ``Value()`` and
``MilliValue()`` round up (away from zero) to the next integer.

Bounded like every input of the contract: at most :data:`MAX_QUANTITY_LENGTH` characters and a
decimal exponent within ±:data:`MAX_EXPONENT`, so ``"1e999999999"`` or a 5,000-digit number is a
:class:`QuantityError` naming the text, never a Decimal overflow. (The physical bound of what the
number may mean, bytes or milli-TFLOPS, is the caller's: :mod:`events.bounds`.)
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_UP, Decimal, DecimalException, localcontext

_PATTERN = re.compile(r"^([+-]?)(\d+\.?\d*|\.\d+)(?:(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE]([+-]?\d+))?$",
                      re.ASCII)
"""ASCII digits only: ``"１０"`` (full-width) is not a quantity, as in Kubernetes' parser."""
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
            "P": Decimal("1e15"), "E": Decimal("1e18")}


MAX_QUANTITY_LENGTH = 64
"""Characters of a quantity string (a whole-number int64 has 19 digits)."""

MAX_EXPONENT = 30
"""Largest decimal exponent magnitude (``1e30``; ``E`` suffixes reach 10^18, ``Ei`` 2^60)."""


class QuantityError(ValueError):
    """A string is not a Kubernetes quantity; the message quotes it (cut to 80 characters)."""


def parse(text: str) -> Decimal:
    """Parse a quantity string into an exact Decimal; raises QuantityError."""
    if not isinstance(text, str):
        raise QuantityError(f"invalid quantity {text!r}: not a string")
    if len(text) > MAX_QUANTITY_LENGTH:
        raise QuantityError(f"invalid quantity {text[:80]!r}: longer than {MAX_QUANTITY_LENGTH} characters")
    match = _PATTERN.match(text.strip())
    if not match or not text.strip():
        raise QuantityError(f"invalid quantity {text!r}")
    sign, number, suffix, exponent = match.groups()
    if exponent is not None and abs(int(exponent)) > MAX_EXPONENT:
        raise QuantityError(f"invalid quantity {text!r}: exponent beyond ±{MAX_EXPONENT}")
    try:
        with localcontext() as exact:
            exact.prec = 2 * MAX_QUANTITY_LENGTH + MAX_EXPONENT  # no rounding within the bounds above
            value = Decimal(number)
            if exponent is not None:
                value = value.scaleb(int(exponent))
            elif suffix in _BINARY:
                value *= _BINARY[suffix]
            else:
                value *= _DECIMAL[suffix or ""]
    except DecimalException as exc:  # pragma: no cover - the bounds above keep Decimal exact
        raise QuantityError(f"invalid quantity {text!r}") from exc
    return -value if sign == "-" else value


def _ceil(value: Decimal) -> int:
    return int(value.to_integral_value(rounding=ROUND_CEILING if value >= 0 else ROUND_FLOOR))


def to_value(text: str) -> int:
    """Kubernetes ``Quantity.Value()``: the integer value, rounded up away from zero (bytes, counts)."""
    return _ceil(parse(text))


def to_milli(text: str) -> int:
    """Kubernetes ``Quantity.MilliValue()``: thousandths, rounded up away from zero (milli-TFLOPS)."""
    with localcontext() as exact:
        exact.prec = 2 * MAX_QUANTITY_LENGTH + MAX_EXPONENT
        return _ceil(parse(text) * 1000)


def format_milli(milli: int) -> str:
    """Canonical DecimalSI string of a milli-unit integer: 500 -> "500m", 10000 -> "10", 10**6 -> "1k"."""
    if milli % 1000:
        return f"{milli}m"
    return _format_decimal(milli // 1000)


def _format_decimal(value: int) -> str:
    if value == 0:
        return "0"
    for suffix, factor in (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)


def format_bytes(value: int) -> str:
    """Canonical string of a byte count: binary suffixes when exact ("1Gi"), else DecimalSI ("1k", "1500")."""
    if value == 0:
        return "0"
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        factor = _BINARY[suffix]
        if value % factor == 0:
            return f"{value // factor}{suffix}"
    return _format_decimal(value)


def format_percent_milli(milli_percent: int) -> str:
    """A compute share in milli-percent as a quantity string: 50_000 -> "50", 12_500 -> "12500m"."""
    return format_milli(milli_percent)


# Human units: the one formatter of every user-facing message (the allocator's reasons, API errors and
# the CLI's text output). Wire values stay canonical quantity strings (format_milli / format_bytes).


def _human(value: Decimal, places: int) -> str:
    """``value`` rounded half up to ``places`` decimals, thousands grouped, trailing zeros dropped."""
    text = f"{value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP):,.{places}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def tflops_text(milli_tflops: int, *, places: int = 3) -> str:
    """Milli-TFLOPS as TFLOPS: ``6000`` -> ``"6 TFLOPS"``, ``133714`` -> ``"133.714 TFLOPS"``,
    ``1788682500`` with ``places=1`` -> ``"1,788,682.5 TFLOPS"``."""
    return f"{_human(Decimal(milli_tflops) / 1000, places)} TFLOPS"


_VRAM_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def vram_text(vram_bytes: int, *, places: int = 2) -> str:
    """Bytes in the largest binary unit that is at least 1: ``4Gi`` -> ``"4 GiB"``,
    ``20000000000`` -> ``"18.63 GiB"``, ``512Mi`` -> ``"512 MiB"``; 0 -> ``"0 GiB"``; below 1 KiB in bytes."""
    if vram_bytes == 0:
        return "0 GiB"
    for unit, factor in _VRAM_UNITS:
        if abs(vram_bytes) >= factor:
            return f"{_human(Decimal(vram_bytes) / factor, places)} {unit}"
    return f"{vram_bytes} bytes"


def percent_text(milli_percent: int, *, places: int = 1) -> str:
    """A compute share in milli-percent: ``50_000`` -> ``"50 %"``, ``12_500`` -> ``"12.5 %"``."""
    return f"{_human(Decimal(milli_percent) / 1000, places)} %"


def share_text(part: int, whole: int) -> str:
    """``part`` as a percentage of ``whole`` (same units): ``(20, 15)`` -> ``"133.3 %"``; "" when
    ``whole`` is 0 (no share to give)."""
    return f"{_human(Decimal(100 * part) / whole, 1)} %" if whole else ""
