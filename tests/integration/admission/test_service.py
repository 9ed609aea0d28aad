"""run_admission(): a self-signed pair is generated, HTTPS verifies against it, intents reach NATS,
and the events stream feeds the view (GPU models for dedicated-gpu)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import msgspec
import pytest
from nats.js import JetStreamContext

from events import codec, decisions, subjects
from events.values import GpuSpec, Resources
from services.admission.settings import load_settings
from services.admission.wiring import run_admission
from tests.unit.admission.builders import a_pod, a_review

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


async def test_run_admission_serves_with_a_generated_certificate(tmp_path: Path, nats_url: str,
                                                                 jetstream: JetStreamContext) -> None:
    gpu = GpuSpec(name="g0", capacity=Resources(milli_tflops=312_000, vram_bytes=40 * 2**30), model="A100")
    event = decisions.NodeRegistered(at=datetime(2026, 1, 1, tzinfo=UTC), node="n", pool="mock", gpus=(gpu,))
    await jetstream.publish(subjects.event_subject("node_registered"), codec.encode(event))
    settings = load_settings(environ={}, nats_url=nats_url, port=0, kube=False, cert_dir=str(tmp_path),
                             default_pool="mock")
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(run_admission(settings, on_ready=ready.set_result))
    try:
        url = await asyncio.wait_for(ready, 20)
        context = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))
        dedicated = a_pod({"dedicated-gpu": "true", "gpu-model": "A100"}, uid="svc-uid")
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
            async with asyncio.timeout(20):
                while True:  # the view learns the A100 from the events stream shortly after start
                    async with session.post(f"{url}/mutate-v1-pod", data=a_review(dedicated)) as response:
                        review = msgspec.json.decode(await response.read())["response"]
                    if review["allowed"]:
                        break
                    await asyncio.sleep(0.05)
        info = await jetstream.stream_info(subjects.INTENT_STREAM)
        intent = codec.decode_intent((await jetstream.get_msg(subjects.INTENT_STREAM, info.state.last_seq)).data)
        assert intent.intent_id == "admit-svc-uid"
        assert intent.spec.request.milli_tflops == 312_000  # type: ignore[union-attr]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
