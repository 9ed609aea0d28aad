"""The dashboard's test and benchmark stack: ``gpuledger up`` on the openb inventory plus a scripted
history (grants, a capacity queue, a release that grants from the queue, a resize, a rejected resize,
a lost node),
and the 10,412-GPU extension (525 more 8-GPU nodes in pool ``scale``). Also finds the browser.

Shared by tests/integration/dashboard and benchmarks/bench_dashboard.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec

from events import intents
from events.values import AllocationSpec, GpuSpec, Resources
from services.discovery import static
from services.shared import messaging
from services.trace import openb
from tests.integration.cli.upstack import default_sigint

CLI = [sys.executable, "-c", "from services.cli.main import run; run()"]
GIB = 1 << 30
OPENB_GPUS = 6212
SCALE_NODES = 525
SCALE_GPUS_PER_NODE = 8
TOTAL_GPUS = OPENB_GPUS + SCALE_NODES * SCALE_GPUS_PER_NODE  # 10,412
A10 = Resources(milli_tflops=125_000, vram_bytes=24 * GIB)
"""One whole A10 of the openb inventory (two exist: openb-node-1032 and -1033)."""
LOST_NODE = "openb-node-1212"
"""Re-registered with a 1 s heartbeat TTL and then checked: Lost."""
OPENB = Path(__file__).resolve().parents[3] / "data/openb/openb_node_list_gpu_node.csv"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> str | None:
    """Path of a Chromium: ``GPULEDGER_CHROMIUM``, else the first of BROWSERS on PATH."""
    given = os.environ.get("GPULEDGER_CHROMIUM", "")
    if given:
        return given if Path(given).exists() else None
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


class Stack:
    """A running ``gpuledger up`` (its output in ``log``); ``token`` is its GPULEDGER_API_TOKEN
    ("": ``up --no-token``)."""

    def __init__(self, data_dir: Path, *, token: str = "") -> None:
        self.data_dir = data_dir
        self.log = data_dir.parent / "up.log"
        self.token = token
        env = {**os.environ, "GPULEDGER_API_TOKEN": token}
        self._out = self.log.open("ab")
        open_api = [] if token else ["--no-token"]  # no token given: an open API, as before tokens were the default
        self.process = subprocess.Popen([*CLI, "up", "--data-dir", str(data_dir), *open_api], stdout=self._out,
                                        stderr=subprocess.STDOUT, env=env, preexec_fn=default_sigint)
        self.http = ""
        self.nats = ""

    def wait_up(self, timeout_s: float = 240) -> None:
        """Wait for ``gpuledger is up`` and read the endpoints."""
        deadline = time.monotonic() + timeout_s
        while "gpuledger is up" not in self.log.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"gpuledger up did not come up:\n{self.log.read_text()[-4000:]}")
            time.sleep(0.2)
        found = json.loads((self.data_dir / "endpoints.json").read_text())
        self.http, self.nats = found["allocator_http"], found["nats_url"]

    def get(self, path: str) -> Any:
        """GET ``path`` of the allocator as JSON (with the bearer token when there is one)."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        with urllib.request.urlopen(urllib.request.Request(self.http + path, headers=headers), timeout=30) as r:
            return json.loads(r.read())

    def publish(self, *items: intents.AnyIntent) -> None:
        """Publish intents to the stack's JetStream in order (in a thread of its own: the caller may
        be inside Playwright's event loop)."""
        with ThreadPoolExecutor(1) as worker:
            worker.submit(asyncio.run, _publish(self.nats, items)).result()

    def wait(self, what: str, predicate: Any, timeout_s: float = 60, path: str = "/api/v1/status") -> Any:
        """Poll ``path`` (JSON) until ``predicate(document)``; returns that document."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.get(path)
            if predicate(status):
                return status
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not reached within {timeout_s}s")
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGINT, then wait (kill after 60 s)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._out.close()


async def _publish(url: str, items: tuple[intents.AnyIntent, ...]) -> None:
    client = await messaging.connect(url, name="dashboard-scenario")
    try:
        js = client.jetstream()
        for item in items:
            await messaging.publish_intent(js, item)
    finally:
        await client.close()


def request(allocation_id: str, amount: Resources, *, models: tuple[str, ...] = (), gpus: int = 1,
            qos: str = "medium", namespace: str = "team-a") -> intents.RequestAllocation:
    """A RequestAllocation of ``gpus`` × ``amount`` (request = limit) for pod ``allocation_id``."""
    spec = AllocationSpec(allocation_id=allocation_id, namespace=namespace, pod=allocation_id, pool="default",
                          request=amount, limit=amount, gpu_models=models, gpu_count=gpus, qos=qos)
    return intents.RequestAllocation(intent_id=f"req-{allocation_id}", spec=spec)


def release(allocation_id: str) -> intents.ReleaseAllocation:
    """Release ``allocation_id`` (pod finished)."""
    return intents.ReleaseAllocation(intent_id=f"rel-{allocation_id}", allocation_id=allocation_id,
                                     reason="pod finished")


def history(stack: Stack) -> None:
    """The scripted history (see the module docstring); returns once all of it is decided."""
    shares = [request(f"infer-{i:02d}", Resources(milli_tflops=8_000 + 500 * i, vram_bytes=2 * GIB),
                      models=("T4",)) for i in range(24)]
    stack.publish(*shares, request("train-a", A10, models=("A10",)), request("train-b", A10, models=("A10",)),
                  request("train-c", A10, models=("A10",)), request("train-d", A10, models=("A10",), qos="low"))
    stack.wait("train-d queued", lambda s: s["allocations"]["queued"] >= 2)
    half = Resources(milli_tflops=100_000, vram_bytes=20 * GIB)
    too_big = Resources(milli_tflops=200_000, vram_bytes=24 * GIB)
    stack.publish(release("train-a"),
                  intents.ResizeAllocation(intent_id="resize-train-c", allocation_id="train-c", request=half,
                                           limit=A10, pool="default"),
                  intents.ResizeAllocation(intent_id="resize-train-b", allocation_id="train-b", request=too_big,
                                           limit=too_big, pool="default"))
    stack.wait("train-c granted from the queue", lambda s: s["allocations"]["queued"] == 1)
    node = next(n for n in static.load_inventory(OPENB) if n.node == LOST_NODE)
    stack.publish(msgspec.structs.replace(node, intent_id=f"ttl-{LOST_NODE}", heartbeat_ttl_s=1.0))
    time.sleep(1.5)  # let its heartbeat TTL run out, then ask for the check
    stack.publish(intents.CheckHeartbeats(intent_id="check-heartbeats-1"))
    stack.wait("the lost node", lambda n: n["phase"] == "Lost", path=f"/api/v1/nodes/{LOST_NODE}")


def trace_load(stack: Stack, count: int) -> None:
    """Request the first ``count`` GPU pods of the openb trace (Alibaba, default pod list) and wait
    until each is decided (one outcome event or more per request)."""
    specs = openb.pods()[:count]
    start = stack.get("/api/v1/status")["position"]
    stack.publish(*(intents.RequestAllocation(intent_id=f"trace-{s.allocation_id}", spec=s) for s in specs))
    stack.wait(f"{len(specs)} trace pods decided", lambda s: s["position"] >= start + len(specs), timeout_s=300)


def scale_nodes() -> list[intents.RegisterNode]:
    """525 nodes of 8 × A100-80GB in pool ``scale``: with openb, 10,412 GPUs."""
    return [intents.RegisterNode(
        intent_id=f"register-scale-{n:04d}", node=f"scale-node-{n:04d}", pool="scale",
        gpus=tuple(GpuSpec(name=f"scale-node-{n:04d}-gpu-{i}", model="A100", index=i,
                           capacity=Resources(milli_tflops=312_000, vram_bytes=80 * GIB))
                   for i in range(SCALE_GPUS_PER_NODE)))
        for n in range(SCALE_NODES)]


def scale_to_10k(stack: Stack) -> None:
    """Register :func:`scale_nodes` and wait until the projection holds TOTAL_GPUS + the lost node's."""
    stack.publish(*scale_nodes())
    stack.wait("10,412 GPUs", lambda s: sum(p["gpus"] for p in s["pools"]) >= TOTAL_GPUS, timeout_s=180)
