"""The nats-py boundary: connect, create the two JetStream streams idempotently, publish intents.

:func:`connect` is the one way every service and the CLI reach NATS: it applies the
``GPULEDGER_NATS_*`` security settings (user/password, token, NKey, creds, TLS; see
:class:`services.shared.settings.NatsSecurity` and docs/security.md) to every connection.

Every producer publishes intents through :func:`publish_intent` (subject
``gpuledger.intent.<tag>``, ``Nats-Msg-Id`` = intent id, so JetStream drops duplicates within
the dedupe window and the allocator drops them beyond it).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import structlog
from nats import errors as nats_errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from events import codec, subjects
from events.base import Intent
from services.shared.settings import NatsSecurity, SettingsError, nats_security

log = structlog.get_logger(__name__)


class StreamSettings(msgspec.Struct, kw_only=True):
    """JetStream stream settings: replicas (3 in production), dedupe window seconds, storage."""

    replicas: int = 1
    duplicate_window_s: float = 120.0
    file_storage: bool = True
    max_age_s: float = 0.0


class Client(NATS):
    """nats-py's client whose :meth:`close` survives a server that vanished: on Python 3.12
    nats-py's close then raises TypeError from its transport teardown; the connection is gone
    either way, so that error is logged and the close completes."""

    async def close(self) -> None:
        """Close the connection (see the class docstring); never raises TypeError."""
        try:
            await super().close()
        except TypeError as exc:
            log.warning("nats close after the server vanished", error=repr(exc))


def tls_context(security: NatsSecurity) -> ssl.SSLContext:
    """A client TLS context: verify the server against ``tls_ca`` (the system roots when empty),
    present ``tls_cert``/``tls_key`` when set. Raises SettingsError naming the variable of a
    file that is not a usable PEM CA bundle, certificate or key."""
    try:
        context = ssl.create_default_context(cafile=security.tls_ca or None)
    except (ssl.SSLError, OSError) as exc:
        raise SettingsError(f"GPULEDGER_NATS_TLS_CA: {security.tls_ca} is not a PEM CA bundle: {exc}",
                            field="GPULEDGER_NATS_TLS_CA") from exc
    if security.tls_cert:
        try:
            context.load_cert_chain(security.tls_cert, security.tls_key)
        except (ssl.SSLError, OSError) as exc:
            raise SettingsError(f"GPULEDGER_NATS_TLS_CERT/GPULEDGER_NATS_TLS_KEY: {security.tls_cert} and "
                                f"{security.tls_key} are not a matching PEM certificate and key: {exc}",
                                field="GPULEDGER_NATS_TLS_CERT") from exc
    return context


def connect_options(security: NatsSecurity) -> dict[str, Any]:
    """nats-py ``connect`` keyword arguments for ``security`` (empty for an anonymous plain client)."""
    options: dict[str, Any] = {}
    if security.user:
        options.update(user=security.user, password=security.password)
    if security.token:
        options["token"] = security.token
    if security.nkey_seed_file:
        options["nkeys_seed"] = security.nkey_seed_file
    if security.creds_file:
        options["user_credentials"] = security.creds_file
    if security.tls:
        options["tls"] = tls_context(security)
    if security.inbox_prefix:
        options["inbox_prefix"] = security.inbox_prefix
    return options


async def connect(url: str, *, name: str = "gpuledger", security: NatsSecurity | None = None,
                  **options: Any) -> Client:
    """Connect to NATS with reconnects enabled forever (a restarting server is waited for).

    ``security`` defaults to the ``GPULEDGER_NATS_*`` settings of the environment
    (:func:`services.shared.settings.nats_security`; SettingsError names a bad variable);
    credentials inside ``url`` (``nats://user:password@host:port``, as ``gpuledger up`` writes
    them) are used by nats-py as given. ``options`` go to nats-py's ``connect`` as they are.
    """
    security = nats_security() if security is None else security
    arguments: dict[str, Any] = {"name": name, "max_reconnect_attempts": -1, "reconnect_time_wait": 0.5,
                                 "connect_timeout": 5, **connect_options(security), **options}
    client = Client()
    await client.connect(url, **arguments)
    return client


def _stream_config(name: str, prefix: str, settings: StreamSettings) -> StreamConfig:
    return StreamConfig(
        name=name,
        subjects=[f"{prefix}.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE if settings.file_storage else StorageType.MEMORY,
        num_replicas=settings.replicas,
        duplicate_window=settings.duplicate_window_s,
        max_age=settings.max_age_s or None,
    )


async def ensure_streams(js: JetStreamContext, settings: StreamSettings | None = None) -> None:
    """Create GPULEDGER_INTENTS and GPULEDGER_EVENTS, or update them to ``settings``; idempotent.

    Without ``settings`` (producers) missing streams are created with the defaults and existing ones
    are left as they are, so a producer never scales the allocator's R3 streams down to R1; a
    producer not permitted to create a stream waits until the allocator has.
    """
    explicit = settings is not None
    settings = settings or StreamSettings()
    for name, prefix in (
        (subjects.INTENT_STREAM, subjects.INTENT_SUBJECT_PREFIX),
        (subjects.EVENT_STREAM, subjects.EVENT_SUBJECT_PREFIX),
    ):
        config = _stream_config(name, prefix, settings)
        try:
            await js.stream_info(name)
        except NotFoundError:
            await (js.add_stream(config) if explicit else _create_or_wait(js, config))
        else:
            if explicit:
                await js.update_stream(config)


async def _create_or_wait(js: JetStreamContext, config: StreamConfig, *, poll_s: float = 1.0) -> None:
    """A producer creates a missing stream, or, when its NATS user may not (deploy/base/auth.conf:
    only the allocator manages streams; the denied request is never answered), waits until it exists."""
    try:
        await js.add_stream(config)
        return
    except nats_errors.TimeoutError:
        log.warning("cannot create the stream (not permitted?); waiting for the allocator to create it",
                    stream=config.name)
    while True:
        await asyncio.sleep(poll_s)
        try:
            await js.stream_info(str(config.name))
            return
        except (NotFoundError, nats_errors.TimeoutError):
            continue


async def publish_intent(js: JetStreamContext, intent: Intent, *, timeout: float = 5.0) -> int:
    """Publish ``intent``; returns its stream sequence (a duplicate returns the original's)."""
    ack = await js.publish(
        subjects.intent_subject(codec.tag_of(intent)),
        codec.encode(intent),
        timeout=timeout,
        headers={"Nats-Msg-Id": intent.intent_id},
    )
    return int(ack.seq)


async def subscribe_events(js: JetStreamContext, *, cb: Callable[[Msg], Awaitable[None]] | None = None) -> Any:
    """An ordered push subscription to every event of GPULEDGER_EVENTS from its first message:
    a consumer's way to rebuild its own view (replay, then follow). Without ``cb``, read
    ``.messages``; unsubscribe when done."""
    return await js.subscribe(
        f"{subjects.EVENT_SUBJECT_PREFIX}.>", ordered_consumer=True, deliver_policy=DeliverPolicy.ALL, cb=cb
    )
