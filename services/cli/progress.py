"""Progress of long CLI work, on stderr: a Rich spinner or bar on a terminal, a plain line every
``PERIOD_S`` seconds otherwise (so logs of a pipe or CI job show that work goes on).

:class:`Ticker` is for work without a count (``replay --verify``): it runs a thread that ticks
while the block runs. :class:`Meter` is for counted work (inventory load, trace replay): the
caller calls :meth:`Meter.update` with the amount done.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import Any

PERIOD_S = 5.0
"""Seconds between two plain progress lines when stderr is not a terminal."""


def _tty() -> bool:
    return sys.stderr.isatty()


class Ticker:
    """``with Ticker("verifying the log"):`` shows that the block is running and for how long."""

    def __init__(self, label: str, *, period_s: float = PERIOD_S) -> None:
        self.label, self.period_s = label, period_s
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._status: Any = None

    def __enter__(self) -> Ticker:
        self._start = time.monotonic()
        if _tty():
            from rich.console import Console

            self._status = Console(stderr=True).status(self.label)
            self._status.__enter__()
        else:
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()
        return self

    def _tick(self) -> None:
        while not self._done.wait(self.period_s):
            print(f"{self.label}: {time.monotonic() - self._start:.0f} s", file=sys.stderr, flush=True)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._done.set()
        if self._status is not None:
            self._status.__exit__(kind, exc, tb)
        if self._thread is not None:
            self._thread.join()


class Meter:
    """Counted progress: ``meter.update(done)`` with ``done`` out of ``total``; a Rich bar on a
    terminal, else a line ``label: done/total (pct %)`` at most every ``period_s`` seconds."""

    def __init__(self, label: str, total: int, *, period_s: float = PERIOD_S, enabled: bool = True) -> None:
        self.label, self.total, self.period_s, self.enabled = label, total, period_s, enabled
        self._progress: Any = None
        self._task: Any = None
        self._last = 0.0

    def __enter__(self) -> Meter:
        self._last = time.monotonic()
        if self.enabled and _tty():
            from rich.console import Console
            from rich.progress import Progress

            self._progress = Progress(console=Console(stderr=True), transient=True)
            self._progress.__enter__()
            self._task = self._progress.add_task(self.label, total=self.total)
        return self

    def update(self, done: int, note: str = "") -> None:
        """Report ``done`` units finished (``note`` is appended to the plain line)."""
        if not self.enabled:
            return
        if self._progress is not None:
            self._progress.update(self._task, completed=done)
            return
        now = time.monotonic()
        if now - self._last >= self.period_s:
            self._last = now
            pct = 100 * done / self.total if self.total else 100.0
            print(f"{self.label}: {done:,}/{self.total:,} ({pct:.0f} %){' ' + note if note else ''}",
                  file=sys.stderr, flush=True)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.__exit__(kind, exc, tb)
