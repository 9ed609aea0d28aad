"""The external recommender (``external_recommender.go``) against an in-test HTTP scaler, through the engine."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from services.autoscaler import external
from services.autoscaler.config import ExternalScaler
from tests.unit.autoscaler.builders import T0, rl, spec
from tests.unit.autoscaler.world import World

KEY = ("ml", "llama")


class Scaler:
    """A fake external scaler: records requests, answers with ``reply`` and ``status``."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, Any], str]] = []
        self.reply: Any = {}
        self.status = 200
        self.url = ""


@pytest.fixture
async def scaler() -> AsyncIterator[Scaler]:
    fake = Scaler()

    async def recommend(request: web.Request) -> web.Response:
        fake.requests.append((await request.json(), request.headers.get("Authorization", "")))
        return web.json_response(fake.reply, status=fake.status)

    app = web.Application()
    app.router.add_post("/recommend", recommend)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/recommend"  # type: ignore[union-attr]
    try:
        yield fake
    finally:
        await runner.cleanup()


def world_for(url: str, *, delay: str = "0s") -> World:
    config = {"autoSetResources": {"enable": True, "targetResource": "all", "initialDelayPeriod": "0s"},
              "externalScaler": {"enable": True, "url": url, "initialDelayPeriod": delay,
                                 "apiKeySecretRef": {"name": "scaler-key"}}}
    world = World()
    world.node()
    world.allocate(spec("a-0", attributes={"tensor-fusion.ai/autoscale": "true",
                                           "gpuledger.io/autoscaling-config": json.dumps(config)}))
    return world


async def round_trip(world: World, secrets: Path | None = None) -> None:
    now = T0 + timedelta(minutes=5)
    world.now = now
    scaler = world.engine.external_scaler(KEY, now=now)
    assert scaler is not None
    async with aiohttp.ClientSession() as session:
        try:
            answer: Any = await external.ask(session, scaler, workload="llama", namespace="ml",
                                             current=world.engine.current_of(KEY), secrets_dir=secrets)
        except external.ExternalError as exc:
            answer = exc
    for intent in world.engine.evaluate(KEY, now=now, answer=answer):
        world.send(intent)


async def test_scale_up_answer_is_applied_with_the_bearer_token(scaler: Scaler, tmp_path: Path) -> None:
    (tmp_path / "scaler-key").mkdir()
    (tmp_path / "scaler-key" / "token").write_text("s3cret\n")
    scaler.reply = {"needScaleUp": True, "reason": "busy", "recommendedResources": {
        "requests": {"tflops": "110", "vram": "110Gi"}, "limits": {"tflops": "120", "vram": "120Gi"}}}
    world = world_for(scaler.url)
    await round_trip(world, tmp_path)
    body, auth = scaler.requests[0]
    assert body == {"workloadName": "llama", "namespace": "ml", "currentResources": {
        "requests": {"tflops": "10", "vram": "8Gi"}, "limits": {"tflops": "20", "vram": "16Gi"}}}
    assert auth == "Bearer s3cret"
    assert world.engine.view.workers["a-0"].current == rl((110, 110), (120, 120))
    assert world.engine.states[KEY].reason == "busy"


async def test_no_scaling_needed_is_a_noop(scaler: Scaler) -> None:
    scaler.reply = {"needScaleUp": False, "needScaleDown": False}
    world = world_for(scaler.url)
    await round_trip(world)
    assert world.engine.view.workers["a-0"].current == rl((10, 8), (20, 16))
    assert world.engine.states[KEY].reason == "NoScalingNeeded"


@pytest.mark.parametrize(("status", "reply"), [(500, {"error": "down"}), (200, ["not", "an", "object"])])
async def test_failure_abandons_the_round(scaler: Scaler, status: int, reply: Any) -> None:
    scaler.status, scaler.reply = status, reply
    world = world_for(scaler.url)
    await round_trip(world)
    assert world.engine.states[KEY].reason == "ExternalError"
    assert world.engine.view.workers["a-0"].current == rl((10, 8), (20, 16))


def test_young_workload_is_not_asked() -> None:
    world = world_for("http://127.0.0.1:9/never", delay="1h")
    assert world.engine.external_scaler(KEY, now=T0 + timedelta(minutes=5)) is None
    assert world.engine.external_scaler(KEY, now=T0 + timedelta(hours=2)) is not None


def test_api_key_without_mount_is_empty() -> None:
    assert external.api_key(ExternalScaler(enable=True, url="x", api_key_secret_ref={"name": "k"}), None) == ""
