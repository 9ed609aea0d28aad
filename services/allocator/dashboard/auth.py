"""The dashboard's authentication: the API's bearer token, or the same token in a cookie.

With a token configured (``GPULEDGER_API_TOKEN``), every dashboard route except ``/ui/static/``
needs ``Authorization: Bearer <token>`` or the cookie :data:`COOKIE`. Browsers get the cookie
from a login link: any dashboard URL with ``?token=<token>`` answers 303 to the same URL without
it and sets the cookie (HttpOnly, SameSite=Strict, path ``/ui``); a wrong token answers 401.
Without a token configured, the dashboard is open (as the API is).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

COOKIE = "gpuledger_token"
PREFIX = "/ui"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_DENIED = (
    "<!doctype html><title>gpuledger: sign in</title><h1>401: sign in</h1>"
    "<p>This dashboard needs the API token. Open <code>{prefix}/?token=&lt;token&gt;</code> once: "
    "the token is kept in a cookie for this browser.</p>"
)


def _matches(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def _denied(message: str) -> web.Response:
    return web.Response(status=401, text=_DENIED.format(prefix=PREFIX) + f"<p>{message}</p>",
                        content_type="text/html", headers={"WWW-Authenticate": 'Bearer realm="gpuledger"'})


def middleware(token: str) -> Middleware:
    """An aiohttp middleware enforcing ``token`` (empty: everything passes) as described above."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not token or request.path.startswith(f"{PREFIX}/static/"):
            return await handler(request)
        if "token" in request.query:
            if not _matches(request.query["token"], token):
                return _denied("The token in the link is wrong.")
            query = {k: v for k, v in request.query.items() if k != "token"}
            response = web.Response(status=303, headers={"Location": str(request.rel_url.with_query(query))})
            response.set_cookie(COOKIE, token, path=PREFIX, httponly=True, samesite="Strict")
            return response
        if _matches(_bearer(request), token) or _matches(request.cookies.get(COOKIE), token):
            return await handler(request)
        return _denied("No valid token was sent (header or cookie).")

    return check
