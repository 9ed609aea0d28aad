"""Recently rendered dashboard pages, served again for a second: N viewers cost one render.

The Cluster page walks every GPU of the projection (its pool figures, the GPU map) and the
Placement-quality page every sample of its series; each viewer's page script refetches them when
the log moves (every 2 s while intents arrive), so their cost grew with the number of open tabs
and, on a machine shared with the writer, took its CPU (BENCHMARKS.md "Read load": these two
pages were 85 % of a loaded reader's CPU). A page rendered for the same path and query within
:data:`MAX_AGE_S` seconds is answered again instead: a viewer sees the log at most that much
older than a fresh render would show (the page's ``data-position`` says which position it shows,
and the script fetches again at its next tick). Only successful (200) renders are kept; a page is
never shared between paths or queries, and holds nothing of the viewer (no token, no cookie).
Bounded: at most :data:`MAX_PAGES` entries, all dropped when full (a client varying its query
gets a fresh render each time, as without this).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web

MAX_AGE_S = 1.0
"""Seconds a rendered page is answered again."""
MAX_PAGES = 64
"""Pages kept at most (path and query each)."""

Handler = Callable[[web.Request], Awaitable[web.Response]]


class RecentPages:
    """Rendered 200 pages by path and query (``request.path_qs``), each with when it was rendered
    (``clock``: seconds, monotonic)."""

    def __init__(self, *, max_age_s: float = MAX_AGE_S, max_pages: int = MAX_PAGES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age_s = max_age_s
        self.max_pages = max_pages
        self.clock = clock
        self._pages: dict[str, tuple[float, web.Response]] = {}
        self.renders = 0
        """Renders tried (requests not answered from here, failed ones included); for tests."""

    def serving(self, handler: Handler) -> Handler:
        """``handler`` answered from here when it rendered the same path and query less than
        ``max_age_s`` seconds ago (a copy of that response: same body, status and headers)."""

        async def answer(request: web.Request) -> web.Response:
            key, now = request.path_qs, self.clock()
            kept = self._pages.get(key)
            if kept is not None and now - kept[0] < self.max_age_s:
                return _copy(kept[1])
            self.renders += 1
            response = await handler(request)
            if response.status == 200:
                if len(self._pages) >= self.max_pages:
                    self._pages.clear()
                self._pages[key] = (now, response)
                return _copy(response)
            return response

        return answer


def _copy(response: web.Response) -> web.Response:
    """A fresh response with ``response``'s body, status and headers (a response object is sent once)."""
    return web.Response(body=response.body, status=response.status, headers=response.headers)
