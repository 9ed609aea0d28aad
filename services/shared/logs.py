"""Structured logging for every service: structlog configured once, JSON or console lines on stderr.

``setup(level="info", json=False)`` is called by each entry point; libraries only call
``structlog.get_logger(__name__)``. Context (intent id, epoch) is bound with
``structlog.contextvars.bind_contextvars``.
"""

from __future__ import annotations

import logging
import sys

import structlog

LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def setup(level: str = "info", *, json: bool = False) -> None:
    """Configure structlog (and stdlib logging) to write ``level``+ lines to stderr.

    ``level`` is one of :data:`LEVELS` (case-insensitive); raises ValueError naming it otherwise.
    ``json`` selects one JSON object per line (for log shippers) instead of console rendering.
    """
    number = LEVELS.get(level.lower())
    if number is None:
        raise ValueError(f"log level: unknown value {level!r} (one of {', '.join(LEVELS)})")
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(number),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=max(number, logging.WARNING), stream=sys.stderr)
