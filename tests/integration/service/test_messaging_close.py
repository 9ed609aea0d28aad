"""``messaging.connect``'s client closes cleanly after its server vanished (nats-py's own ``close``
raises TypeError then on Python 3.12)."""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from services.shared import messaging
from services.shared.natsserver import NatsServer
from services.shared.settings import NatsSecurity

pytestmark = pytest.mark.integration


async def test_close_after_the_server_was_killed_does_not_raise(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "nats")
    server.start()
    client = await messaging.connect(server.url, security=NatsSecurity())
    await client.jetstream().add_stream(name="S", subjects=["s.>"])
    server.kill()
    await client.close()
    assert client.is_closed


async def test_a_type_error_from_nats_py_close_is_contained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken_close(self: NATS) -> None:
        raise TypeError("'NoneType' object is not callable")

    with NatsServer(tmp_path / "nats") as server:
        client = await messaging.connect(server.url, security=NatsSecurity())
        monkeypatch.setattr(NATS, "close", broken_close)
        await client.close()  # logged, not raised
        monkeypatch.undo()
        await client.close()
