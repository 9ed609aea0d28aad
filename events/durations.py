"""Go durations (``time.ParseDuration`` syntax: ``"90s"``, ``"1h30m"``, ``"1.5h"``, ``"300ms"``) in exact seconds.

One grammar for every reader: the pod parser (annotations such as ``eviction-protection`` and
``gang-timeout``, which adds bounds and messages) and the allocation domain (the protection rule).
"""

from __future__ import annotations

import re
from decimal import Decimal

_DURATION = re.compile(r"(?:(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+")
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_SECONDS = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "µs": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}


def go_duration_s(text: str) -> Decimal | None:
    """Seconds of a non-negative Go duration written with units (``"1h30m"`` -> 5400), or None when
    ``text`` is not one (empty, unit-less, signed, malformed). No length bound: callers bound it."""
    if not _DURATION.fullmatch(text):
        return None
    return sum((Decimal(n) * _SECONDS[u] for n, u in _PART.findall(text)), Decimal(0))
