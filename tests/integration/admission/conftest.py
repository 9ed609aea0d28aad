"""Fixtures for admission integration tests: an HTTPS webhook (trustme CA) on real NATS."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import msgspec
import pytest
import trustme
from aiohttp import web
from nats.js import JetStreamContext

from events.base import Intent
from services.admission.view import ClusterView
from services.admission.webhook import build_app
from services.podspec import PoolDefaults
from services.shared import messaging


class Webhook:
    """A running webhook: ``post(body) -> AdmissionReview response dict`` over verified HTTPS."""

    def __init__(self, url: str, session: aiohttp.ClientSession, token: str = "") -> None:
        self.url = url
        self.session = session
        self.token = token

    async def post(self, body: bytes) -> dict[str, Any]:
        """The AdmissionReview answer (HTTP 200), sent with the webhook's bearer token if it has one."""
        status, decoded = await self.send(body, token=self.token)
        assert status == 200, decoded
        return decoded

    async def send(self, body: bytes, *, token: str = "") -> tuple[int, dict[str, Any]]:
        """HTTP status and JSON answer of a POST sent with ``token`` ("" = no Authorization header)."""
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        async with self.session.post(f"{self.url}/mutate-v1-pod", data=body, headers=headers) as response:
            decoded: dict[str, Any] = msgspec.json.decode(await response.read())
            return response.status, decoded


@pytest.fixture(scope="session")
def tls_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def start_webhook(tls_ca: trustme.CA) -> AsyncIterator[Callable[..., Any]]:
    """Factory: start a webhook with a publish function; returns a Webhook (stopped after the test)."""
    runners: list[web.AppRunner] = []
    sessions: list[aiohttp.ClientSession] = []

    async def start(publish: Callable[[Intent], Any], *, failure_policy: str = "deny",
                    view: ClusterView | None = None, token: str = "") -> Webhook:
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls_ca.issue_cert("127.0.0.1", "localhost").configure_cert(server_ctx)
        app = build_app(view=view or ClusterView(pool=PoolDefaults(name="mock")), publish=publish,
                        failure_policy=failure_policy, publish_timeout_s=1.0, token=token)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        client_ctx = ssl.create_default_context()
        tls_ca.configure_trust(client_ctx)
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ctx))
        sessions.append(session)
        return Webhook(f"https://127.0.0.1:{port}", session, token)

    yield start
    for session in sessions:
        await session.close()
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
async def nats_publish(jetstream: JetStreamContext) -> AsyncIterator[Callable[[Intent], Any]]:
    async def publish(intent: Intent) -> int:
        return await messaging.publish_intent(jetstream, intent, timeout=1.0)

    yield publish
