"""Benchmark: discovery throughput (static import, GFD label parsing, change detection, watch stream).

1. ``load_inventory`` of the Alibaba node CSV (1,213 nodes, 6,212 GPUs), median of 5 runs.
2. ``node_report`` on N synthetic GFD-labelled Node dicts (8 GPUs each): microseconds per node.
3. ``handle_event`` on N unchanged MODIFIED events (the common case of a Node status update).
4. ``watch_objects`` through the in-test API server (real HTTP + kubernetes-asyncio): N Nodes
   created while watching, events/s until the watcher has seen all of them.

    python3 benchmarks/bench_discovery.py [--nodes 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubernetes_asyncio import client

from events.base import Intent
from services.discovery import kubernetes as k8s
from services.discovery.catalog import ModelTable
from services.discovery.heartbeat import Inventory
from services.discovery.inventory import ReportConfig
from services.discovery.static import load_inventory
from services.shared import kube
from tests.fixtures.kube_api import KubeApiServer, build_node

OPENB = Path(__file__).resolve().parent.parent / "data/openb/openb_node_list_gpu_node.csv"
GFD = {k8s.PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB", k8s.COUNT_LABEL: "8", k8s.MEMORY_LABEL: "81920"}


def bench_static() -> tuple[float, int]:
    runs = []
    for _ in range(5):
        started = time.perf_counter()
        nodes = load_inventory(OPENB)
        runs.append(time.perf_counter() - started)
    return statistics.median(runs), len(nodes)


def bench_labels(count: int, table: ModelTable) -> float:
    objs = [build_node(f"node-{i:05d}", labels=GFD) for i in range(count)]
    started = time.perf_counter()
    for obj in objs:
        k8s.node_report(obj, table=table, config=ReportConfig())
    return (time.perf_counter() - started) / count * 1e6


async def bench_unchanged(count: int, table: ModelTable) -> float:
    inventory, obj = Inventory(), build_node("node-0", labels=GFD)

    async def publish(intent: Intent) -> None:
        return None

    event = kube.WatchEvent(type="MODIFIED", object=obj)
    started = time.perf_counter()
    for _ in range(count):
        await k8s.handle_event(event, inventory=inventory, publish=publish, table=table, config=ReportConfig())
    return (time.perf_counter() - started) / count * 1e6


async def bench_watch(count: int) -> float:
    server = KubeApiServer()
    await server.start()
    seen = 0
    done = asyncio.Event()
    try:
        async with await kube.api_client(url=server.url) as api:
            async def follow() -> None:
                nonlocal seen
                async for event in kube.watch_objects(client.CoreV1Api(api).list_node):
                    if event.type == "ADDED":
                        seen += 1
                        if seen == count:
                            done.set()
            task = asyncio.create_task(follow())
            await server.wait_watching("nodes")
            started = time.perf_counter()
            for i in range(count):
                server.add_node(f"node-{i:05d}", labels=GFD)
                if i % 100 == 0:
                    await asyncio.sleep(0)
            await asyncio.wait_for(done.wait(), 600)
            elapsed = time.perf_counter() - started
            task.cancel()
    finally:
        await server.stop()
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    args = parser.parse_args()
    table = ModelTable.load()
    print(f"python {platform.python_version()} on {platform.machine()}, {args.nodes} nodes")
    seconds, nodes = bench_static()
    print(f"static CSV import: {nodes} nodes in {seconds * 1000:.1f} ms (median of 5)")
    print(f"GFD labels -> RegisterNode: {bench_labels(args.nodes, table):.1f} us/node (8 GPUs)")
    print(f"unchanged MODIFIED event: {asyncio.run(bench_unchanged(args.nodes, table)):.1f} us/event")
    print(f"watch stream via in-test API server: {asyncio.run(bench_watch(args.nodes)):.0f} events/s")


if __name__ == "__main__":
    main()
