"""The in-order rule both intent sources share (JetStream's consumer and the in-memory twin).

A fetch may hold a late redelivery of something already committed (below the expected sequence),
sequences the stream no longer holds (an operator's ``delete_msg``) and gaps where a delivery was
lost in flight (a reconnect, an ack-wait redelivery overtaking). :func:`split_in_order` keeps the
run that continues the expected sequence; the loop commits it and rewinds for the rest.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import structlog

from services.allocator.ports import Delivery

log = structlog.get_logger(__name__)


async def split_in_order(deliveries: Sequence[Delivery], expected: int, *,
                         ack_late: Callable[[Delivery], Awaitable[None]],
                         deleted: Callable[[int, int], Awaitable[bool]],
                         ) -> tuple[list[Delivery], list[Delivery], int]:
    """The run of ``deliveries`` continuing stream sequence ``expected``, the rest from the first
    gap on, and the count of sequences skipped as deleted (``deleted(first, last)`` is True when
    the stream holds nothing in ``first..last``). Deliveries below ``expected`` before the run are
    passed to ``ack_late`` and dropped: they were committed and only their ack was missing."""
    fresh: list[Delivery] = []
    skipped = 0
    for index, delivery in enumerate(deliveries):
        seq = delivery.stream_seq
        if seq < expected and not fresh:
            await ack_late(delivery)
            continue
        if seq > expected and await deleted(expected, seq - 1):
            log.warning("intent stream sequences deleted; skipped", first=expected, last=seq - 1)
            skipped += seq - expected
            expected = seq
        if seq != expected:
            log.warning("sequence gap; rewinding", expected=expected, got=seq)
            return fresh, list(deliveries[index:]), skipped
        fresh.append(delivery)
        expected += 1
    return fresh, [], skipped
