"""HTML rendering of the dashboard: the Jinja2 environment (autoescaped), its display filters and
the server-drawn SVG lines of the Placement quality page.

Display units: TFLOPS with one decimal from milli-TFLOPS, VRAM in GiB from bytes, shares in %.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
from aiohttp import web

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=jinja2.select_autoescape(("html",), default=True),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def tflops(milli: int) -> str:
    """``123456`` milli-TFLOPS -> ``"123.5"``."""
    return f"{milli / 1000:,.1f}"


def vram(value: int) -> str:
    """Bytes -> GiB with one decimal: ``85899345920`` -> ``"80.0"``."""
    return f"{value / 2**30:,.1f}"


def pct(value: float, digits: int = 1) -> str:
    """A percentage with ``digits`` decimals: ``12.345`` -> ``"12.3"``."""
    return f"{value:.{digits}f}"


def when(moment: datetime | None) -> str:
    """UTC ``YYYY-MM-DD HH:MM:SS`` (empty for None)."""
    return "" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def share_of(used: int, capacity: int) -> float:
    """``used / capacity`` as a percentage (0 when capacity is 0)."""
    return 100 * used / capacity if capacity else 0.0


_env.filters.update(tflops=tflops, vram=vram, pct=pct, when=when)
_env.globals.update(share_of=share_of)


def polyline(values: Sequence[float], *, width: int = 600, height: int = 80, top: float = 100.0) -> str:
    """SVG ``points`` of ``values`` (0..``top``) spread over ``width`` x ``height`` pixels."""
    if not values:
        return ""
    step = width / max(1, len(values) - 1)
    return " ".join(f"{i * step:.1f},{height - min(top, max(0.0, v)) * height / top:.1f}"
                    for i, v in enumerate(values))


SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                               "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
"""Headers of every page: nothing loads from outside the allocator, no inline script, no framing,
and the login link's token never leaves in a Referer."""


def page(template: str, *, status: int = 200, **context: Any) -> web.Response:
    """Render ``template`` with ``context`` into an HTML response (with SECURITY_HEADERS)."""
    html = _env.get_template(template).render(**context)
    return web.Response(text=html, status=status, content_type="text/html", charset="utf-8",
                        headers=SECURITY_HEADERS)


def problem(message: str, *, field: str, status: int = 400) -> web.Response:
    """An error page naming the offending query field (4xx)."""
    return page("error.html", status=status, title=f"{status}", message=message, field=field, position=None,
                active="", role="")
