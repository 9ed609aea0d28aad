"""The dashboard's token check (services/allocator/dashboard/auth.py) on a real aiohttp server."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given, settings
from hypothesis import strategies as st

from services.allocator.dashboard import auth, render

TOKEN = "s3cret"


async def _page(request: web.Request) -> web.Response:
    return web.Response(text=f"page {request.path}?{request.query_string}")


def _app(token: str) -> web.Application:
    sub = web.Application(middlewares=[auth.middleware(token)])
    sub.router.add_get("/", _page)
    sub.router.add_get("/queue", _page)
    sub.router.add_static("/static/", render.STATIC)
    app = web.Application()
    app.add_subapp(auth.PREFIX, sub)
    return app


@pytest.fixture
async def client() -> AsyncIterator[TestClient[web.Request, web.Application]]:
    async with TestClient(TestServer(_app(TOKEN))) as running:
        yield running


async def test_without_a_token_nothing_but_static_assets_answers(client: TestClient[web.Request, web.Application]
                                                                 ) -> None:
    denied = await client.get("/ui/queue")
    assert denied.status == 401 and "?token=" in await denied.text()
    assert denied.headers["WWW-Authenticate"].startswith("Bearer")
    assert (await client.get("/ui/static/live.js")).status == 200
    assert (await client.get("/ui/queue", headers={"Authorization": "Bearer wrong"})).status == 401
    assert (await client.get("/ui/queue", cookies={auth.COOKIE: "wrong"})).status == 401


async def test_bearer_header_or_cookie_pass(client: TestClient[web.Request, web.Application]) -> None:
    assert (await client.get("/ui/queue", headers={"Authorization": f"Bearer {TOKEN}"})).status == 200
    session = auth.new_session(TOKEN)
    assert (await client.get("/ui/queue", cookies={auth.COOKIE: session})).status == 200


async def test_the_cookie_is_not_the_token_and_a_session_expires(client: TestClient[web.Request, web.Application]
                                                                 ) -> None:
    assert (await client.get("/ui/queue", cookies={auth.COOKIE: TOKEN})).status == 401  # the old, raw-token cookie
    expired = auth.new_session(TOKEN, now=time.time() - auth.SESSION_S - 1)
    assert (await client.get("/ui/queue", cookies={auth.COOKIE: expired})).status == 401
    other = auth.new_session("another-token")
    assert (await client.get("/ui/queue", cookies={auth.COOKIE: other})).status == 401
    expiry, nonce, mac = auth.new_session(TOKEN).split(".")
    longer = f"{int(expiry) + 10**6}.{nonce}.{mac}"  # a forged expiry breaks the MAC
    assert (await client.get("/ui/queue", cookies={auth.COOKIE: longer})).status == 401


@given(value=st.text(max_size=120))
@settings(max_examples=200, deadline=None)
def test_no_malformed_cookie_is_a_session(value: str) -> None:
    assert not auth.session_valid(value, TOKEN)


async def test_login_link_sets_a_strict_httponly_cookie_and_drops_the_token(
        client: TestClient[web.Request, web.Application]) -> None:
    response = await client.get(f"/ui/queue?page=2&token={TOKEN}", allow_redirects=False)
    assert response.status == 303
    assert response.headers["Location"] == "/ui/queue?page=2"
    cookie = response.cookies[auth.COOKIE]
    assert TOKEN not in cookie.value and auth.session_valid(cookie.value, TOKEN)
    assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie["path"] == "/ui"
    assert int(cookie["max-age"]) == auth.SESSION_S and not cookie["secure"]  # served over plain http
    wrong = await client.get("/ui/queue?token=nope", allow_redirects=False)
    assert wrong.status == 401 and auth.COOKIE not in wrong.cookies


async def test_no_token_configured_means_open() -> None:
    async with TestClient(TestServer(_app(""))) as open_client:
        response = await open_client.get("/ui/queue?token=anything")
        assert response.status == 200 and await response.text() == "page /ui/queue?token=anything"
