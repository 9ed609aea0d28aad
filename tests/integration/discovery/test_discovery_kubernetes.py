"""The kubernetes source against the in-test API server: add, update (labels, cordon), delete, watch restart."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from events.base import Intent
from events.intents import RegisterNode, RemoveNode
from services.cli.main import app
from services.discovery import settings, wiring
from services.discovery.kubernetes import COUNT_LABEL, MEMORY_LABEL, PRODUCT_LABEL
from services.shared import logs
from tests.fixtures.kube_api import KubeApiServer

pytestmark = pytest.mark.timeout(60)

GFD = {PRODUCT_LABEL: "NVIDIA-L40S", COUNT_LABEL: "4", MEMORY_LABEL: "46068"}


class Recorder:
    """Collects published intents; ``wait_for`` polls for a matching one (liveness bound, not timing)."""

    def __init__(self) -> None:
        self.intents: list[Intent] = []

    async def __call__(self, intent: Intent) -> None:
        self.intents.append(intent)

    async def wait_for(self, match: Callable[[Intent], bool], *, after: int = 0) -> Intent:
        async with asyncio.timeout(20):
            while True:
                found = [i for i in self.intents[after:] if match(i)]
                if found:
                    return found[0]
                await asyncio.sleep(0.01)


def registered(node: str, check: Callable[[RegisterNode], bool] = lambda _: True) -> Callable[[Intent], bool]:
    return lambda i: isinstance(i, RegisterNode) and i.node == node and check(i)


@pytest.fixture
async def running(kube_api: KubeApiServer) -> AsyncIterator[Recorder]:
    recorder, stop = Recorder(), asyncio.Event()
    config = settings.load(environ={}, source="kubernetes", kube_url=kube_api.url, heartbeat_interval_s=0,
                           watch_timeout_s=30)
    task = asyncio.create_task(wiring.run_discovery(config, publish=recorder, stop=stop))
    try:
        yield recorder
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


async def test_add_update_cordon_and_delete_are_published(kube_api: KubeApiServer, running: Recorder) -> None:
    kube_api.add_node("gpu-1", labels={**GFD, "gpuledger.io/pool": "inference"})
    kube_api.add_node("cpu-1", labels={"role": "system"})
    added = await running.wait_for(registered("gpu-1"))
    assert isinstance(added, RegisterNode) and added.pool == "inference" and len(added.gpus) == 4
    assert {g.model for g in added.gpus} == {"L40S"} and added.gpus[0].capacity.vram_bytes == 46068 * 2**20
    await kube_api.wait_watching("nodes")
    mark = len(running.intents)
    kube_api.patch("nodes", "gpu-1", {"metadata": {"labels": {COUNT_LABEL: "2"}}})
    await running.wait_for(registered("gpu-1", lambda i: len(i.gpus) == 2), after=mark)
    kube_api.patch("nodes", "gpu-1", {"spec": {"unschedulable": True}})
    await running.wait_for(registered("gpu-1", lambda i: not i.schedulable), after=mark)
    kube_api.delete("nodes", "gpu-1")
    await running.wait_for(lambda i: isinstance(i, RemoveNode) and i.node == "gpu-1", after=mark)
    assert not any(getattr(i, "node", "") == "cpu-1" for i in running.intents)


async def test_malformed_node_is_skipped_while_others_are_reported(kube_api: KubeApiServer,
                                                                   running: Recorder) -> None:
    kube_api.add_node("broken", labels={**GFD, COUNT_LABEL: "many"})
    kube_api.add_node("fine", labels=GFD)
    await running.wait_for(registered("fine"))
    kube_api.patch("nodes", "broken", {"metadata": {"labels": {COUNT_LABEL: "1"}}})
    fixed = await running.wait_for(registered("broken"))
    assert isinstance(fixed, RegisterNode) and len(fixed.gpus) == 1


async def test_watch_restart_and_410_lose_no_change(kube_api: KubeApiServer, running: Recorder) -> None:
    kube_api.add_node("a", labels=GFD)
    kube_api.add_node("b", labels=GFD)
    await running.wait_for(registered("b"))
    await kube_api.wait_watching("nodes")
    kube_api.end_watches()                      # stream ends: resume from the last resourceVersion
    kube_api.add_node("c", labels=GFD)
    await running.wait_for(registered("c"))
    await kube_api.wait_watching("nodes")
    kube_api.delete("nodes", "a")               # happens while history is compacted away
    kube_api.expire()                           # 410 Gone: re-list must notice "a" is gone
    removed = await running.wait_for(lambda i: isinstance(i, RemoveNode))
    assert isinstance(removed, RemoveNode) and removed.node == "a"
    assert sum(1 for i in running.intents if registered("b")(i)) == 1  # re-list did not re-send b


def test_cli_once_prints_the_reports(kube_api_threaded: KubeApiServer, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # CliRunner swaps sys.stderr; a logging setup bound to it would outlive this test.
    monkeypatch.setattr(logs, "setup", lambda *a, **k: None)
    kube_api_threaded.add_node("gpu-1", labels=GFD)
    kube_api_threaded.add_node("gpu-2", labels={PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3", COUNT_LABEL: "8"})
    kubeconfig = kube_api_threaded.write_kubeconfig(tmp_path / "kubeconfig")
    result = CliRunner().invoke(app, ["discovery", "--source", "kubernetes", "--kubeconfig", str(kubeconfig),
                                      "--once", "--print"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [(d["node"], len(d["gpus"]), d["gpus"][0]["model"]) for d in lines] == [
        ("gpu-1", 4, "L40S"), ("gpu-2", 8, "H100_SXM")]
    assert all(d.get("heartbeat_ttl_s", 0) == 0 for d in lines)  # --once: no heartbeats, the node never expires
