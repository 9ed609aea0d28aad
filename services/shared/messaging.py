"""The nats-py boundary: connect, create the two JetStream streams idempotently, publish intents.

Every producer publishes intents through :func:`publish_intent` (subject
``gpuledger.intent.<tag>``, ``Nats-Msg-Id`` = intent id, so JetStream drops duplicates within
the dedupe window and the allocator drops them beyond it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from events import codec, subjects
from events.base import Intent


class StreamSettings(msgspec.Struct, kw_only=True):
    """JetStream stream settings: replicas (3 in production), dedupe window seconds, storage."""

    replicas: int = 1
    duplicate_window_s: float = 120.0
    file_storage: bool = True
    max_age_s: float = 0.0


async def connect(url: str, *, name: str = "gpuledger", **options: Any) -> NATS:
    """Connect to NATS with reconnects enabled forever (a restarting server is waited for)."""
    return await nats.connect(
        url, name=name, max_reconnect_attempts=-1, reconnect_time_wait=0.5, connect_timeout=5, **options
    )


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
    are left as they are, so a producer never scales the allocator's R3 streams down to R1.
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
            await js.add_stream(config)
        else:
            if explicit:
                await js.update_stream(config)


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
