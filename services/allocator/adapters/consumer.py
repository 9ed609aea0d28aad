"""The JetStream side of the allocator loop: the durable pull consumer ``allocator`` on GPULEDGER_INTENTS.

Owns fetching batches, acking/terminating after commit and naking on failure, and *rewinding*:
the consumer is re-created to start right after its ack floor, so that messages a crashed or
failed writer had fetched but not acked come again first and in stream order (a plain nak or an
``ack_wait`` redelivery could let newer messages overtake them). Messages at or below the ack
floor are done; those above it that were committed but not acked are skipped by the processed-
intent check, so a rewind never yields a second decision. Sequences deleted from the stream (an
operator's ``delete_msg`` while no leader ran) are skipped, not waited for.

It implements :class:`services.allocator.ports.IntentSource`: the loop sees only transport-free
:class:`~services.allocator.ports.Delivery` values; the nats-py message behind each one is held
here (by stream sequence) until it is settled, nak'ed or the consumer is rewound.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import structlog
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import FetchTimeoutError, NotFoundError

from events import subjects
from services.allocator.adapters.ordering import split_in_order
from services.allocator.ports import TERM, Action, Delivery

log = structlog.get_logger(__name__)


def to_delivery(msg: Msg) -> Delivery:
    """The transport-free view of one JetStream message (sequence, subject, payload, msg id)."""
    headers = msg.headers or {}
    return Delivery(
        stream_seq=int(msg.metadata.sequence.stream),
        subject=msg.subject,
        data=bytes(msg.data),
        msg_id=headers.get("Nats-Msg-Id", ""),
    )


class IntentConsumer:
    """Pull consumer over GPULEDGER_INTENTS for the leader (an IntentSource). Call :meth:`rewind`
    before fetching.

    ``ack_wait_s``: redelivery timeout of an unacked message; ``max_batch``: largest fetch.
    """

    def __init__(self, nc: NATS, *, max_batch: int, ack_wait_s: float, flush_s: float = 1.0,
                 durable: str = subjects.ALLOCATOR_DURABLE, stream: str = subjects.INTENT_STREAM) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._durable = durable
        self._stream = stream
        self._max_batch = max_batch
        self._ack_wait_s = ack_wait_s
        self._flush_s = flush_s
        self._sub: JetStreamContext.PullSubscription | None = None
        self._held: dict[int, Msg] = {}
        """The message behind each delivery fetched and not yet settled or nak'ed, by stream seq."""

    async def ack_floor(self) -> int:
        """Stream sequence below which every message is acked (0 when the consumer is new)."""
        try:
            info = await self._js.consumer_info(self._stream, self._durable)
        except NotFoundError:
            return 0
        floor = info.ack_floor.stream_seq if info.ack_floor else 0
        return int(floor or 0)

    async def rewind(self) -> int:
        """Re-create the durable consumer to start after its ack floor and subscribe; returns that
        start sequence. Any earlier subscription (and what it had buffered) is dropped."""
        await self.close()
        floor = await self.ack_floor()
        with contextlib.suppress(NotFoundError):
            await self._js.delete_consumer(self._stream, self._durable)
        config = ConsumerConfig(
            durable_name=self._durable,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=floor + 1,
            ack_policy=AckPolicy.ALL,
            ack_wait=self._ack_wait_s,
            max_ack_pending=max(self._max_batch * 4, 1024),
            max_waiting=16,
            filter_subject=f"{subjects.INTENT_SUBJECT_PREFIX}.>",
        )
        await self._js.add_consumer(self._stream, config)
        self._sub = await self._js.pull_subscribe_bind(self._durable, stream=self._stream)
        log.info("intent consumer positioned", start_seq=floor + 1)
        return floor + 1

    async def fetch(self, *, wait_s: float) -> list[Delivery]:
        """Up to ``max_batch`` deliveries in the order the server sent them; ``[]`` when none came
        within ``wait_s``."""
        if self._sub is None:
            raise RuntimeError("IntentConsumer.fetch before rewind")
        try:
            msgs = await self._sub.fetch(self._max_batch, timeout=wait_s)
        except (TimeoutError, NatsTimeoutError, FetchTimeoutError):
            return []
        deliveries = []
        for msg in msgs:
            delivery = to_delivery(msg)
            self._held[delivery.stream_seq] = msg  # a redelivery replaces the older message
            deliveries.append(delivery)
        return deliveries

    async def settle(self, deliveries: Sequence[Delivery], actions: Sequence[Action]) -> None:
        """After commit: term the poison messages, ack the last other one (the consumer's ack policy
        is *all*: one ack covers every earlier message), then flush so the server has them (waiting
        at most ``flush_s``: raises nats' FlushTimeoutError when it does not answer). A delivery
        this consumer no longer holds (rewound since) is left to the rewind's redelivery."""
        last = None
        for delivery, action in zip(deliveries, actions, strict=True):
            msg = self._held.pop(delivery.stream_seq, None)
            if msg is None:
                continue
            if action == TERM:
                await msg.term()
            else:
                last = msg
        if last is not None:
            await last.ack()
        await self._nc.flush(timeout=self._flush_s)  # type: ignore[arg-type]

    async def in_order(self, deliveries: Sequence[Delivery],
                       expected: int) -> tuple[list[Delivery], list[Delivery], int]:
        """Split a fetch into the run that continues stream sequence ``expected``, the rest, and how
        many sequences were skipped as deleted from the stream (logged): see
        :func:`services.allocator.adapters.ordering.split_in_order`."""
        return await split_in_order(deliveries, expected, ack_late=self._ack_late, deleted=self.deleted)

    async def _ack_late(self, delivery: Delivery) -> None:
        msg = self._held.pop(delivery.stream_seq, None)
        if msg is not None:
            await msg.ack()

    async def deleted(self, first: int, last: int) -> bool:
        """True when no stream sequence in ``first..last`` holds a message (deleted or purged):
        one lookup of the next message at or after ``first``."""
        try:
            msg = await self._js.get_msg(self._stream, seq=first, subject=f"{subjects.INTENT_SUBJECT_PREFIX}.>",
                                         next=True)
        except NotFoundError:
            return True
        return int(msg.seq or 0) > last

    async def nak(self, deliveries: Sequence[Delivery], *, delay_s: float) -> None:
        """Give ``deliveries`` back for redelivery after ``delay_s`` (best effort: the server may be gone)."""
        msgs = [msg for d in deliveries if (msg := self._held.pop(d.stream_seq, None)) is not None]
        for msg in msgs:
            try:
                await msg.nak(delay=delay_s)
            except Exception as exc:  # the connection may be down; a rewind redelivers anyway
                log.debug("nak failed", error=repr(exc))
                return

    async def pending(self) -> int:
        """Messages not yet acked by the consumer (unfetched + in flight); 0 if it does not exist."""
        try:
            info = await self._js.consumer_info(self._stream, self._durable)
        except NotFoundError:
            return 0
        return int((info.num_pending or 0) + (info.num_ack_pending or 0))

    async def close(self) -> None:
        """Drop the subscription (the durable consumer stays) and what it had fetched."""
        sub, self._sub = self._sub, None
        self._held.clear()
        if sub is not None:
            try:
                await sub.unsubscribe()
            except Exception as exc:  # already closed connection
                log.debug("unsubscribe failed", error=repr(exc))
