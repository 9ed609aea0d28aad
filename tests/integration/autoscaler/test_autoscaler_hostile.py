"""The running autoscaler against hostile NATS input: recommend requests, samples and events never stop it."""

from __future__ import annotations

import msgspec
import pytest

from events import subjects
from events.metrics import encode_sample
from events.subjects import metrics_subject
from tests.integration.autoscaler.runner import start_autoscaler
from tests.integration.service.harness import until
from tests.unit.autoscaler.builders import sample

pytestmark = pytest.mark.integration

HOSTILE_REQUESTS = [b"\xe9t\xe9", b"[" * 100_000 + b"]" * 100_000, b'{"workload": "' + b"x" * 10_000 + b'"}',
                    b"[1, 2]", b'{"workload": 1e999}']


async def test_hostile_requests_samples_and_events_get_answers_and_the_service_keeps_going(nats_url: str) -> None:
    running = await start_autoscaler(nats_url)
    try:
        nc = running.runtime.nc
        for body in HOSTILE_REQUESTS:
            reply = msgspec.json.decode((await nc.request(subjects.AUTOSCALER_RECOMMEND_SUBJECT, body, timeout=5)).data)
            assert reply["field"] == "workload" and "error" in reply, body[:20]
        far = encode_sample(sample()).replace(b"2026-03-05", b"9999-12-31")
        for payload in (far, b"\xe9", b"[" * 5000, encode_sample(sample(tflops=10**8))):
            await nc.publish(metrics_subject("n1"), payload)
        engine = running.runtime.engine
        await until(lambda: engine.dropped["invalid"] == 4, timeout_s=30, what="hostile samples counted")
        ok = msgspec.json.decode((await nc.request(subjects.AUTOSCALER_RECOMMEND_SUBJECT,
                                                   b'{"workload": "ghost"}', timeout=5)).data)
        assert ok["field"] == "workload" and "unknown" in ok["error"]
    finally:
        await running.stop()
