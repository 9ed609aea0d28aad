"""NATS connections for CLI commands: bounded, quiet, never reconnecting.

A service reconnects forever (services.shared.messaging.connect); a command must not: it uses the
same ``GPULEDGER_NATS_*`` security settings (credentials inside the URL work too), tries
the server twice within ``CONNECT_TIMEOUT_S`` and fails with a message naming the URL (credentials
redacted) and where it came from. nats-py's own error logging is silenced (it printed a traceback
per attempt). ``close`` swallows the TypeError nats-py raises on Python 3.12 when the server has
vanished. nats is imported here, so only commands that talk NATS pay for it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import nats
from nats.aio.client import Client

from services.cli.client import StackUnreachable
from services.shared.messaging import connect_options
from services.shared.settings import nats_security

CONNECT_TIMEOUT_S = 2.0


def redacted(url: str) -> str:
    """``url`` without its password (``nats://user:***@host:port``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


async def _quiet(_error: Exception) -> None:
    return None


async def connect(url: str, *, name: str, where: str = "", **options: Any) -> Client:
    """A NATS client for a CLI command; raises StackUnreachable when no server answers in time."""
    if not url:
        raise StackUnreachable(f"no NATS URL{f' in {where}' if where else ''}: is `gpuledger up` running?")
    security = connect_options(nats_security())  # GPULEDGER_NATS_* credentials, TLS, inbox prefix
    try:
        async with asyncio.timeout(2 * CONNECT_TIMEOUT_S):
            return await nats.connect(url, **{**security, "name": name, "allow_reconnect": False,
                                              "max_reconnect_attempts": 1, "reconnect_time_wait": 0.2,
                                              "connect_timeout": CONNECT_TIMEOUT_S, "error_cb": _quiet,
                                              **options})
    except (OSError, TimeoutError, nats.errors.Error) as exc:
        origin = f" (from {where})" if where else ""
        raise StackUnreachable(f"no NATS server answers at {redacted(url)}{origin}: {exc or type(exc).__name__}. "
                               "Is `gpuledger up` running (or pass --data-dir)?") from None


async def close(client: Client) -> None:
    """Close ``client``; errors of a connection whose server is gone are ignored."""
    with contextlib.suppress(Exception):
        await client.close()
