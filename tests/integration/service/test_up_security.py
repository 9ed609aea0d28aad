"""``gpuledger up`` locks its embedded servers: NATS refuses anonymous and wrong-password clients,
PostgreSQL refuses a wrong password, the passwords live in mode-0600 files of the data dir and
in endpoints.json (0600) and never in the output, and CLI commands still find the stack."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path
from urllib.parse import urlsplit

import nats
import psycopg
import pytest
from nats.errors import Error as NatsError

from tests.integration.service.test_cli_up import INVENTORY, Stack, cli, data_dir  # noqa: F401

pytestmark = pytest.mark.integration


async def _nats_refuses(url: str) -> str:
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    with pytest.raises((NatsError, OSError, asyncio.TimeoutError)):
        client = await nats.connect(url, allow_reconnect=False, connect_timeout=3, error_cb=on_error)
        await client.close()
    return " ".join(errors)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_up_refuses_anonymous_nats_and_wrong_passwords(tmp_path: Path, data_dir: Path) -> None:  # noqa: F811
    inventory = tmp_path / "nodes.csv"
    inventory.write_text(INVENTORY)
    stack = Stack(data_dir, inventory, tmp_path / "up.log")
    try:
        stack.wait_up()
        found = json.loads((data_dir / "endpoints.json").read_text())
        secrets = {p.name: p.read_text().strip() for p in (data_dir / "secrets").iterdir()}
        assert set(secrets) == {"nats-password", "postgres-password", "api-token"}
        assert _mode(data_dir / "endpoints.json") == 0o600 and _mode(data_dir / "secrets") == 0o700
        assert all(_mode(data_dir / "secrets" / name) == 0o600 for name in secrets)
        nats_url, database_url = urlsplit(found["nats_url"]), urlsplit(found["database_url"])
        listeners = [nats_url, database_url, urlsplit(found["allocator_http"])]
        if found["webhook_https"]:
            listeners.append(urlsplit(found["webhook_https"]))
        assert {url.hostname for url in listeners} == {"127.0.0.1"}, found
        assert nats_url.password == secrets["nats-password"]
        assert database_url.password == secrets["postgres-password"]

        anonymous = f"nats://127.0.0.1:{nats_url.port}"
        assert "Authorization Violation" in asyncio.run(_nats_refuses(anonymous))
        wrong = f"nats://{nats_url.username}:not-the-password@127.0.0.1:{nats_url.port}"
        assert "Authorization Violation" in asyncio.run(_nats_refuses(wrong))
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(found["database_url"].replace(secrets["postgres-password"], "wrong"),
                            connect_timeout=5).close()
        psycopg.connect(found["database_url"], connect_timeout=5).close()

        code, status = cli("status", "--json", "--data-dir", str(data_dir))
        assert code == 0 and sum(status["gpus_by_phase"].values()) == 3, status
    finally:
        assert stack.interrupt() == 0, stack.log.read_text()[-4000:]
    output = stack.log.read_text()
    assert not [name for name, value in secrets.items() if value in output], "a password was printed"
    assert "nats://gpuledger:***@127.0.0.1" in output
