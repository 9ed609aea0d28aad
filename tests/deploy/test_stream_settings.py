"""The allocator's stream settings survive producers starting after it (real nats-server).

In a deployment the allocator creates GPULEDGER_INTENTS/EVENTS with ``GPULEDGER_STREAM_REPLICAS=3``;
discovery, the NVML agents and the autoscaler call ``ensure_streams`` without settings when they start.
They must not reset the streams to the defaults (R1), or every agent restart would drop the R3 copies.
A single test server cannot hold R3, so the dedupe window stands in for the replica count.
"""

from __future__ import annotations

import pytest
from nats.js import JetStreamContext

from events import subjects
from services.shared import messaging


@pytest.mark.integration
async def test_a_producer_does_not_reset_the_allocators_stream_settings(jetstream: JetStreamContext) -> None:
    allocator = messaging.StreamSettings(replicas=1, duplicate_window_s=45.0)
    await messaging.ensure_streams(jetstream, allocator)
    await messaging.ensure_streams(jetstream)  # a producer starting later
    for name in (subjects.INTENT_STREAM, subjects.EVENT_STREAM):
        info = await jetstream.stream_info(name)
        assert info.config.duplicate_window == pytest.approx(45.0), name
