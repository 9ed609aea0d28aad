"""Every identity ``GPULEDGER_NATS_*`` offers logs in to a real nats-server that requires it: a token
(from a file), an NKey seed file, user/password from a file; a wrong one is refused."""

from __future__ import annotations

import os
from pathlib import Path

import nkeys
import pytest
from nats.errors import Error as NatsError

from services.shared import messaging
from services.shared.natsserver import NatsServer
from services.shared.settings import nats_security

pytestmark = pytest.mark.integration


def _user_seed(path: Path) -> str:
    """Write a new NKey user seed to ``path``; returns its public key."""
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    path.write_bytes(seed)
    public: bytes = nkeys.from_seed(bytearray(seed)).public_key
    return public.decode()


async def _logs_in(url: str, environ: dict[str, str]) -> bool:
    try:
        client = await messaging.connect(url, security=nats_security(environ), allow_reconnect=False,
                                         connect_timeout=3)
    except (NatsError, OSError):
        return False
    await client.close()
    return True


async def test_token_and_password_files_log_in(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("tok3n\n")
    (tmp_path / "wrong").write_text("other\n")
    config = 'authorization { token: "tok3n" }\n'
    with NatsServer(tmp_path / "nats", config=config) as server:
        assert await _logs_in(server.url, {"GPULEDGER_NATS_TOKEN_FILE": str(tmp_path / "token")})
        assert not await _logs_in(server.url, {"GPULEDGER_NATS_TOKEN_FILE": str(tmp_path / "wrong")})
        assert not await _logs_in(server.url, {})
    config = 'authorization { user: "svc", password: "pw0rd" }\n'
    (tmp_path / "password").write_text("pw0rd")
    with NatsServer(tmp_path / "nats2", config=config) as server:
        assert await _logs_in(server.url, {"GPULEDGER_NATS_USER": "svc",
                                           "GPULEDGER_NATS_PASSWORD_FILE": str(tmp_path / "password")})
        assert not await _logs_in(server.url, {"GPULEDGER_NATS_USER": "svc", "GPULEDGER_NATS_PASSWORD": "pw"})


async def test_an_nkey_seed_file_logs_in_and_another_key_is_refused(tmp_path: Path) -> None:
    public = _user_seed(tmp_path / "user.nk")
    _user_seed(tmp_path / "other.nk")
    config = f'authorization {{ users: [ {{ nkey: "{public}" }} ] }}\n'
    with NatsServer(tmp_path / "nats", config=config) as server:
        assert await _logs_in(server.url, {"GPULEDGER_NATS_NKEY_SEED_FILE": str(tmp_path / "user.nk")})
        assert not await _logs_in(server.url, {"GPULEDGER_NATS_NKEY_SEED_FILE": str(tmp_path / "other.nk")})
