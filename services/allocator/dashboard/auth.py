"""The dashboard's authentication: the API's bearer token, or a session cookie the token opened.

With a token configured (``GPULEDGER_API_TOKEN``), every dashboard route except ``/ui/static/``
needs ``Authorization: Bearer <token>`` or a valid session cookie :data:`COOKIE`. Browsers get the
cookie from a login link: any dashboard URL with ``?token=<token>`` answers 303 to the same URL
without it and sets the cookie; a wrong token answers 401. Without a token configured, the
dashboard is open (as the API is).

The cookie never holds the token. Its value is ``<expiry>.<nonce>.<mac>``: the expiry in Unix
seconds, 16 random bytes, and HMAC-SHA256 of the two under a key derived from the token
(HMAC-SHA256(token, :data:`_KEY_LABEL`)). Any replica with the same token accepts it, changing the
token ends every session, and a session ends after :data:`SESSION_S` (the cookie's ``Max-Age``
too). The cookie is HttpOnly, SameSite=Strict, path ``/ui``, and Secure when the page was served
over https.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

COOKIE = "gpuledger_session"
PREFIX = "/ui"
SESSION_S = 8 * 3600
"""Lifetime of a dashboard session (seconds): a working day; then the login link is needed again."""
_KEY_LABEL = b"gpuledger dashboard session v1"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_DENIED = (
    "<!doctype html><title>gpuledger: sign in</title><h1>401: sign in</h1>"
    "<p>This dashboard needs the API token. Open <code>{prefix}/?token=&lt;token&gt;</code> once: "
    "this browser then keeps a session cookie (not the token) for {hours} hours.</p>"
)


def _matches(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode("utf-8", "backslashreplace"), token.encode())


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def _denied(message: str) -> web.Response:
    return web.Response(status=401, text=_DENIED.format(prefix=PREFIX, hours=SESSION_S // 3600) + f"<p>{message}</p>",
                        content_type="text/html", headers={"WWW-Authenticate": 'Bearer realm="gpuledger"'})


def _key(token: str) -> bytes:
    return hmac.new(token.encode(), _KEY_LABEL, hashlib.sha256).digest()


def _mac(key: bytes, expiry: int, nonce: str) -> str:
    return hmac.new(key, f"{expiry}.{nonce}".encode(), hashlib.sha256).hexdigest()


def new_session(token: str, *, now: float | None = None, lifetime_s: int = SESSION_S) -> str:
    """A cookie value ``<expiry>.<nonce>.<mac>`` valid for ``lifetime_s`` seconds from ``now``
    (default: the clock) under ``token``; it does not contain the token."""
    expiry = int(time.time() if now is None else now) + lifetime_s
    nonce = secrets.token_hex(16)
    return f"{expiry}.{nonce}.{_mac(_key(token), expiry, nonce)}"


def session_valid(value: str | None, token: str, *, now: float | None = None) -> bool:
    """Whether ``value`` is a session :func:`new_session` made under ``token`` that has not expired
    at ``now``; any malformed value is simply not valid."""
    if not value:
        return False
    expiry_text, _, rest = value.partition(".")
    nonce, _, mac = rest.partition(".")
    if not expiry_text.isdigit() or len(expiry_text) > 12 or not nonce or not mac:
        return False
    expiry = int(expiry_text)
    if expiry <= (time.time() if now is None else now):
        return False
    expected = _mac(_key(token), expiry, nonce)
    return hmac.compare_digest(mac.encode("utf-8", "backslashreplace"), expected.encode())


def middleware(token: str, *, lifetime_s: int = SESSION_S) -> Middleware:
    """An aiohttp middleware enforcing ``token`` (empty: everything passes) as described above;
    ``lifetime_s`` is the session's lifetime (seconds)."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not token or request.path.startswith(f"{PREFIX}/static/"):
            return await handler(request)
        if "token" in request.query:
            if not _matches(request.query["token"], token):
                return _denied("The token in the link is wrong.")
            query = {k: v for k, v in request.query.items() if k != "token"}
            response = web.Response(status=303, headers={"Location": str(request.rel_url.with_query(query))})
            response.set_cookie(COOKIE, new_session(token, lifetime_s=lifetime_s), path=PREFIX, httponly=True,
                                samesite="Strict", max_age=lifetime_s, secure=request.secure)
            return response
        if _matches(_bearer(request), token) or session_valid(request.cookies.get(COOKIE), token):
            return await handler(request)
        return _denied("No valid token or session was sent (header or cookie); the session may have expired.")

    return check
