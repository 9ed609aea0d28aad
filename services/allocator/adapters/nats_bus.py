"""The NATS JetStream bus: one client connection, the intent source, the event relay, publishing.

:class:`NatsBus` implements :class:`services.allocator.ports.Bus` for the composition root
(services/allocator/bootstrap.py): it connects (reconnecting forever), ensures both streams and
hands out the leader's :class:`~services.allocator.adapters.consumer.IntentConsumer` and the
:class:`~services.allocator.adapters.relay.EventRelay`. Reconnection callbacks run on nats-py's
``reconnected_cb``.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog
from nats.aio.client import Client as NATS

from events import intents
from services.allocator.adapters.consumer import IntentConsumer
from services.allocator.adapters.relay import EventRelay
from services.allocator.ports import EventStore
from services.shared import messaging

log = structlog.get_logger(__name__)


class NatsBus:
    """The bus over one NATS connection ``nc`` (build it with :meth:`connect`)."""

    def __init__(self, nc: NATS) -> None:
        self.nc = nc
        self._js = nc.jetstream()
        self._on_reconnect: list[Callable[[], None]] = []

    @classmethod
    async def connect(cls, url: str, *, streams: messaging.StreamSettings | None = None,
                      name: str = "gpuledger-allocator") -> NatsBus:
        """Connect to ``url`` and create or update both gpuledger streams to ``streams``; raises
        the connection errors of nats-py (and SettingsError for bad GPULEDGER_NATS_* settings)."""
        bus: NatsBus | None = None

        async def reconnected() -> None:
            log.info("reconnected to NATS")
            if bus is not None:
                for callback in bus._on_reconnect:
                    callback()

        nc = await messaging.connect(url, name=name, reconnected_cb=reconnected)
        bus = cls(nc)
        try:
            await messaging.ensure_streams(bus._js, streams)
        except BaseException:
            await nc.close()
            raise
        return bus

    def intent_source(self, *, max_batch: int, ack_wait_s: float, flush_s: float) -> IntentConsumer:
        """The durable pull consumer ``allocator`` (see :class:`IntentConsumer`)."""
        return IntentConsumer(self.nc, max_batch=max_batch, ack_wait_s=ack_wait_s, flush_s=flush_s)

    def event_sink(self, store: EventStore) -> EventRelay:
        """The relay of ``store``'s log to GPULEDGER_EVENTS."""
        return EventRelay(self.nc, store)

    async def publish(self, intent: intents.AnyIntent) -> int:
        """Publish ``intent`` on its subject with ``Nats-Msg-Id`` = its id; returns the stream seq."""
        return await messaging.publish_intent(self._js, intent)

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` after every reconnection."""
        self._on_reconnect.append(callback)

    async def close(self) -> None:
        """Close the connection (guarded: a close after the server vanished does not raise)."""
        await self.nc.close()
